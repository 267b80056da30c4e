/* no_sandbox_shim.c - an LD_PRELOAD library that makes a machine look as if
 * bubblewrap were not installed, for the test of a worker that lacks the
 * sandbox of python graders (tests/integration/fault_no_sandbox.test.mjs).
 *
 * access() of /usr/bin/bwrap fails with ENOENT, which is how
 * src/core/sandbox.c finds bubblewrap missing; everything else passes
 * through. The worker that loads it and every trainer it starts (which
 * inherits LD_PRELOAD) see no sandbox; the server, without it, has one.
 *
 * This is test code: it lives in tests/fault/, is built by the test with
 * `cc -shared -fPIC`, and is never linked into alallo.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

int access(const char *path, int mode)
{
    if (strcmp(path, "/usr/bin/bwrap") == 0) {
        errno = ENOENT;
        return -1;
    }
    int (*real)(const char *, int) = (int (*)(const char *, int))dlsym(RTLD_NEXT, "access");
    return real ? real(path, mode) : -1;
}
