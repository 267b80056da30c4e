/* test_child.h - for unit tests that fork: a child never outlives its test
 * process.
 *
 * A forked child inherits the test's stdout and stderr, which are ctest's
 * output pipe. When an assert fails, cmocka ends the test there, before the
 * lines that would have killed the child; a child left waiting (pause(), a
 * long training) then holds the pipe open after the test process has
 * ended, and ctest waits on it until its timeout: a failure becomes a 300 s
 * hang that hides the failure's message (store/test_leader_lock did this in
 * CI; docs/testing.md, "Hunting flaky tests").
 *
 * Call test_child_dies_with_parent(parent) first in the child, with the
 * parent's pid taken before fork(): the kernel kills the child (SIGKILL)
 * when the test process ends, however it ends. The setting survives exec
 * of a binary that is not set-uid. Tests still kill their children
 * themselves; this is the net under a failed assert. Linux only (prctl). */
#ifndef ALALLO_TESTS_UNIT_TEST_CHILD_H
#define ALALLO_TESTS_UNIT_TEST_CHILD_H

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

static inline void test_child_dies_with_parent(pid_t parent)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(125); /* no net, or the parent ended before it was set */
}

#endif
