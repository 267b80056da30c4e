/* cmd_client.h - the client commands (jobs, files, models, estimate,
 * workers, ledger, and generate/export of a model by ID through the API)
 * as one sub-command of the binary; argv[0] names which. */
#ifndef ALALLO_CLI_CMD_CLIENT_H
#define ALALLO_CLI_CMD_CLIENT_H

int cmd_client(int argc, char **argv);

#endif
