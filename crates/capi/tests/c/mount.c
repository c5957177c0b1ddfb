/* Mounts a sealfs image with libsealfs (sealfs_mount: served by threads of this process) and
 * compares every path of the source tree with the mount as the kernel shows it (plain lstat,
 * open, read: not libsealfs's reader); then unmounts and checks
 * /proc/mounts and the mount point; then mounts again, unmounts while a file is open (detached
 * lazily: the open file still reads), and checks the errors of a bad mount. Built by
 * tests/c_library.rs with cc against the installed header and library, run under valgrind.
 *
 *   mount IMAGE SOURCE_DIR DIGEST MOUNTPOINT
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sealfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *src, *mnt;
static size_t src_len;
static int problems, files;
static char first[4096]; /* a non-empty regular file, from the root of the tree */

#define PROBLEM(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        if (++problems > 50) exit(1);                                                              \
    } while (0)

static int same_bytes(const char *a_path, const char *b_path) {
    static char a[1 << 16], b[1 << 16];
    int fa = open(a_path, O_RDONLY), fb = open(b_path, O_RDONLY);
    int ok = fa >= 0 && fb >= 0;
    while (ok) {
        ssize_t n = read(fa, a, sizeof a);
        ssize_t m = read(fb, b, sizeof b);
        if (n < 0 || n != m || memcmp(a, b, (size_t)n) != 0) ok = 0;
        else if (n == 0) break;
    }
    if (fa >= 0) close(fa);
    if (fb >= 0) close(fb);
    return ok;
}

static int visit(const char *path, const struct stat *want, int flag, struct FTW *ftw) {
    (void)flag;
    (void)ftw;
    char there[4096];
    snprintf(there, sizeof there, "%s%s", mnt, path + src_len);
    struct stat got;
    if (lstat(there, &got) != 0) {
        PROBLEM("%s: lstat on the mount: %s", path + src_len, strerror(errno));
        return 0;
    }
    /* A directory's size is its file system's (EROFS packs entries), not the tree's. */
    if (got.st_mode != want->st_mode ||
        (!S_ISDIR(want->st_mode) && got.st_size != want->st_size) ||
        got.st_uid != want->st_uid || got.st_gid != want->st_gid)
        PROBLEM("%s: mode/size/owner %o/%lld/%u:%u on the mount, %o/%lld/%u:%u in the source",
                path + src_len, got.st_mode, (long long)got.st_size, got.st_uid, got.st_gid,
                want->st_mode, (long long)want->st_size, want->st_uid, want->st_gid);
    if (S_ISREG(want->st_mode)) {
        files++;
        if (!*first && want->st_size > 0) snprintf(first, sizeof first, "%s", path + src_len);
        if (!same_bytes(there, path)) PROBLEM("%s: other bytes on the mount", path + src_len);
    }
    /* Symlink targets are not read here: valgrind (3.19) holds its lock through readlink, which
     * a FUSE server in the same process then never answers (--sim-hints=fuse-compatible covers
     * stat, open and read, not readlink). The Python suite compares them (diff -r). */
    return 0;
}

/* Whether `mnt` is a mount point in /proc/mounts. */
static int in_proc_mounts(void) {
    FILE *f = fopen("/proc/mounts", "r");
    char line[8192], dev[4096], dir[4096];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "%4095s %4095s", dev, dir) == 2 && strcmp(dir, mnt) == 0) found = 1;
    if (f) fclose(f);
    return found;
}

/* Entries of `mnt` besides . and .. */
static int entries(void) {
    DIR *d = opendir(mnt);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: mount IMAGE SOURCE_DIR DIGEST MOUNTPOINT\n");
        return 2;
    }
    src = argv[2];
    src_len = strlen(src);
    mnt = argv[4];
    struct sealfs_error err;
    struct sealfs_image *img;
    struct sealfs_open_options oo = {.digest = argv[3]};
    if (sealfs_open(argv[1], &oo, &img, &err) != 0) {
        fprintf(stderr, "sealfs_open: %s\n", err.message);
        return 1;
    }

    /* Refused: a mount point that is not a directory, and -o rw. */
    struct sealfs_mount_handle *m = NULL;
    if (sealfs_mount(img, argv[1], NULL, &m, &err) != -1 || err.code != ENOTDIR || errno != ENOTDIR)
        PROBLEM("mount on a file: want ENOTDIR, got %d (%s)", err.code, err.message);
    struct sealfs_mount_options rw = {.options = "nodev,rw"};
    if (sealfs_mount(img, mnt, &rw, &m, &err) != -1 || err.code != EINVAL)
        PROBLEM("-o rw: want EINVAL, got %d (%s)", err.code, err.message);

    struct sealfs_mount_options mo = {.options = "nodev,nosuid", .threads = 2};
    if (sealfs_mount(img, mnt, &mo, &m, &err) != 0) {
        fprintf(stderr, "sealfs_mount: %s\n", err.message);
        return 1;
    }
    /* The mount does not need the image handle. */
    sealfs_close(img);
    if (!in_proc_mounts()) PROBLEM("%s: not in /proc/mounts while mounted", mnt);
    if (nftw(src, visit, 16, FTW_PHYS) != 0) PROBLEM("nftw %s: %s", src, strerror(errno));
    char stats[8192];
    ssize_t n = sealfs_mount_stats(m, stats, sizeof stats, &err);
    if (n < 0 || (size_t)n >= sizeof stats || !strstr(stats, argv[3]))
        PROBLEM("sealfs_mount_stats: %zd, %s (the digest expected in trust)", n,
                n < 0 ? err.message : stats);
    if (sealfs_unmount(m, &err) != 0) PROBLEM("sealfs_unmount: %s", err.message);
    if (in_proc_mounts()) PROBLEM("%s: still in /proc/mounts after sealfs_unmount", mnt);
    if (entries() != 0) PROBLEM("%s: not empty after sealfs_unmount", mnt);

    /* Unmounted while a file is open: detached lazily, the file still reads. */
    if (sealfs_open(argv[1], &oo, &img, &err) != 0 ||
        sealfs_mount(img, mnt, NULL, &m, &err) != 0) {
        fprintf(stderr, "mounting again: %s\n", err.message);
        return 1;
    }
    sealfs_close(img);
    char there[8192], here[8192];
    snprintf(there, sizeof there, "%s%s", mnt, first);
    snprintf(here, sizeof here, "%s%s", src, first);
    int fd = *first ? open(there, O_RDONLY) : -1;
    if (fd < 0) PROBLEM("%s: no file to hold open: %s", there, strerror(errno));
    if (sealfs_unmount(m, &err) != 0) PROBLEM("sealfs_unmount, busy: %s", err.message);
    if (in_proc_mounts()) PROBLEM("%s: still in /proc/mounts after a busy sealfs_unmount", mnt);
    if (fd >= 0) {
        char a[256], b[256];
        int fs = open(here, O_RDONLY);
        ssize_t x = pread(fd, a, sizeof a, 0), y = pread(fs, b, sizeof b, 0);
        if (x <= 0 || x != y || memcmp(a, b, (size_t)x) != 0)
            PROBLEM("%s: an open file of the detached mount reads %zd bytes, want %zd", here, x, y);
        close(fs);
        close(fd);
        /* The serving threads end and are joined once the last file is closed. */
        sleep(3);
    }
    sealfs_unmount(NULL, NULL);
    printf("%d files compared through the mount, %d problems\n", files, problems);
    return problems ? 1 : 0;
}
