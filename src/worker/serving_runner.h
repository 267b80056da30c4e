/* serving_runner.h - `alallo serving run`: the inference engine on a
 * cluster's node, as a serving job of an engine's pool runs it
 * (control/engine_serving.h; docs/serving.md, "On a cluster").
 *
 *   alallo serving run --server URL --id ID --token @FILE --work-dir DIR
 *                      [--host HOST] [--model-memory BYTES]
 *                      [--max-running N] [--threads N]
 *
 * 1. Starts `alallo inference --listen 0.0.0.0:0 --key @FILE` (the
 *    serving job's token is the engine's key) and reads the port it bound
 *    from DIR/ID.port.
 * 2. Every SERVING_BEAT_S it reads the engine's stats (over its port, with
 *    the key) and POSTs /internal/serving/ID/heartbeat {host, port,
 *    engine_id, stats} with the token: the server routes requests to the
 *    engine from what it says (HOST: --host, else the node's name,
 *    SLURMD_NODENAME or the host name). An answer {"stop": true}, or a
 *    401 or 404 (the server does not want this engine), stops it.
 * 3. SIGTERM or SIGINT stop the engine and end the runner.
 * The server unreachable is waited out: the engine goes on serving
 * whatever reaches it, and the heartbeats resume when it is back.
 *
 * Exit status: 0 stopped (a signal, or the server's stop); 1 the engine
 * ended or could not start (the control side submits the serving job
 * again); 2 bad arguments; 3 the server refused this engine.
 */
#ifndef ALALLO_WORKER_SERVING_RUNNER_H
#define ALALLO_WORKER_SERVING_RUNNER_H

#define SERVING_BEAT_S 3
#define SERVING_PORT_WAIT_S 60 /* for the engine to bind its port */

int cmd_serving(int argc, char **argv);

#endif
