/* sandbox.c - untrusted Python under bubblewrap with limits (sandbox.h). */
#include "core/sandbox.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/text.h"

#define PRLIMIT "/usr/bin/prlimit"
#define SETPRIV "/usr/bin/setpriv"
#define NOBODY "65534"
#define TMP_BYTES "16777216" /* the private /tmp, at most */
#define MAX_ARGS 96
/* what runs before the program: the process limit */
#define PROLOGUE "import resource as _r\n_r.setrlimit(_r.RLIMIT_NPROC, (%d, %d))\ndel _r\n%s"

struct sandbox_limits sandbox_default_limits(void)
{
    return (struct sandbox_limits){.wall_ms = 5000,
                                   .cpu_s = 5,
                                   .memory_bytes = (size_t)256 << 20,
                                   .processes = 16,
                                   .file_bytes = (size_t)1 << 20,
                                   .out_cap = (size_t)64 << 10};
}

struct args {
    char *v[MAX_ARGS + 1];
    int n;
    char links[6][256]; /* the targets of /bin, /lib ... when they are links */
    int n_links;
};

static void add(struct args *a, const char *s)
{
    if (a->n < MAX_ARGS)
        a->v[a->n++] = (char *)s;
    a->v[a->n] = NULL;
}

/* /bin, /lib ... as this machine has them: a link into /usr made again
 * inside (a merged /usr), a folder bound read-only, nothing when absent. */
static void add_root_dir(struct args *a, const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0 || a->n_links >= 6)
        return;
    if (S_ISLNK(st.st_mode)) {
        char *t = a->links[a->n_links];
        ssize_t n = readlink(path, t, sizeof a->links[0] - 1);
        if (n <= 0)
            return;
        t[n] = '\0';
        a->n_links++;
        add(a, "--symlink");
        add(a, t);
        add(a, path);
    } else if (S_ISDIR(st.st_mode)) {
        add(a, "--ro-bind");
        add(a, path);
        add(a, path);
    }
}

int sandbox_python(const char *program, const char *in, size_t in_len,
                   const struct sandbox_limits *lim, struct child_result *r, char *why,
                   size_t whycap)
{
    memset(r, 0, sizeof *r);
    const char *need[] = {SANDBOX_BWRAP, SANDBOX_PYTHON, PRLIMIT, SETPRIV};
    const char *what[] = {"bubblewrap", "python3", "util-linux's prlimit",
                          "util-linux's setpriv"};
    for (int i = 0; i < 4; i++) {
        if (i == 3 && geteuid() != 0)
            break;
        if (access(need[i], X_OK) != 0) {
            text_error(why, whycap, "%s (%s) is not installed", what[i], need[i]);
            return -1;
        }
    }
    char as[48], cpu[48], fsize[48];
    snprintf(as, sizeof as, "--as=%zu", lim->memory_bytes);
    snprintf(cpu, sizeof cpu, "--cpu=%d:%d", lim->cpu_s, lim->cpu_s + 1);
    snprintf(fsize, sizeof fsize, "--fsize=%zu", lim->file_bytes);
    /* the process limit, set inside (sandbox.h says why) before the program */
    int len = snprintf(NULL, 0, PROLOGUE, lim->processes, lim->processes, program);
    char *full = len < 0 ? NULL : malloc((size_t)len + 1);
    if (full)
        snprintf(full, (size_t)len + 1, PROLOGUE, lim->processes, lim->processes, program);
    if (!full) {
        text_error(why, whycap, "out of memory");
        return -1;
    }
    struct args a = {.n = 0};
    if (geteuid() == 0) {
        const char *drop[] = {SETPRIV, "--reuid=" NOBODY, "--regid=" NOBODY, "--clear-groups"};
        for (int i = 0; i < 4; i++)
            add(&a, drop[i]);
    }
    const char *head[] = {PRLIMIT, as, cpu, fsize, "--core=0", "--", SANDBOX_BWRAP,
                          "--unshare-all", "--unshare-user", "--die-with-parent",
                          "--new-session", "--clearenv", "--cap-drop", "ALL",
                          "--ro-bind", "/usr", "/usr"};
    for (size_t i = 0; i < sizeof head / sizeof *head; i++)
        add(&a, head[i]);
    const char *roots[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
    for (size_t i = 0; i < sizeof roots / sizeof *roots; i++)
        add_root_dir(&a, roots[i]);
    const char *tail[] = {"--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
                          "--ro-bind-try", "/etc/alternatives", "/etc/alternatives",
                          "--dev", "/dev", "--remount-ro", "/dev",
                          "--size", TMP_BYTES, "--tmpfs", "/tmp",
                          "--remount-ro", "/", "--chdir", "/tmp",
                          "--setenv", "LANG", "C.UTF-8", "--",
                          SANDBOX_PYTHON, "-I", "-S", "-c", full};
    for (size_t i = 0; i < sizeof tail / sizeof *tail; i++)
        add(&a, tail[i]);
    int rc = child_run_input(a.v, in, in_len, lim->wall_ms, lim->out_cap, r);
    if (rc != 0)
        text_error(why, whycap, "the sandbox could not start: %s", strerror(errno));
    free(full);
    return rc;
}

void sandbox_last_line(const struct child_result *r, char *line, size_t cap)
{
    const char *text = r->err;
    const char *end = text + strlen(text);
    while (end > text && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' '))
        end--;
    const char *start = end;
    while (start > text && start[-1] != '\n')
        start--;
    text_printf(line, cap, "%.*s", (int)(end - start), start); /* cut at cap */
}

static atomic_bool works;

bool sandbox_available(char *why, size_t whycap)
{
    if (atomic_load(&works))
        return true;
    struct sandbox_limits lim = sandbox_default_limits();
    struct child_result r;
    char err[300];
    if (sandbox_python("pass", "", 0, &lim, &r, err, sizeof err) != 0) {
        text_error(why, whycap, "%s", err);
        return false;
    }
    bool ok = r.exit_status == 0;
    if (!ok) {
        /* bwrap's own words, its last line: "No permissions to create new
         * namespace", "setting up uid map: Permission denied" ... */
        char last[300];
        sandbox_last_line(&r, last, sizeof last);
        if (r.timed_out)
            text_error(why, whycap, "a test run in the sandbox did not finish in %lld ms",
                       (long long)lim.wall_ms);
        else
            text_error(why, whycap, "bwrap cannot make its sandbox here (%s)",
                       *last ? last : "no reason given");
    }
    child_result_free(&r);
    if (ok)
        atomic_store(&works, true);
    return ok;
}
