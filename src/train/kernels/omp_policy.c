/* omp_policy.c - passive OpenMP waiting via re-exec (see omp_policy.h). */
#include "train/kernels/omp_policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_ARGS 256

void omp_policy_passive(int argc, char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || argc < 1 || argc > MAX_ARGS - 2)
        return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0)
        return;
    char *args[MAX_ARGS];
    args[0] = "alallo";
    for (int i = 0; i < argc; i++)
        args[i + 1] = argv[i];
    args[argc + 1] = NULL;
    fflush(NULL);
    execv("/proc/self/exe", args);
    /* exec failed: carry on as we are */
    fprintf(stderr, "alallo: could not restart with passive OpenMP waiting; going on\n");
}
