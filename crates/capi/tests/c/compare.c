/* Reads a sealfs image through libsealfs and compares every path with the source tree, as the
 * C library and the kernel's system calls show them (lstat, readlink, llistxattr, lgetxattr,
 * read): type, mode, owner, size, mtime, link count, device numbers, symlink targets, xattrs,
 * directory entries and every byte. Then 8 threads share the one image handle (and one file
 * handle) and read every file again. Checks the errors too. Built by tests/c_library.rs with cc
 * against the installed header and library (pkg-config), and run under valgrind.
 *
 *   compare IMAGE SOURCE_DIR DIGEST
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <sealfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

static struct sealfs_image *img;
static const char *src;
static size_t src_len;
static int problems;
static char **files;
static size_t nfiles;
static struct sealfs_file *shared; /* the largest file, read by every thread */
static char *shared_src;

#define PROBLEM(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        if (++problems > 50) exit(1);                                                              \
    } while (0)

/* Compares the bytes of regular file `rel` (image) with `path` (source), reading at offsets. */
static int same_content(struct sealfs_file *f, const char *path, off_t size) {
    static __thread char a[1 << 16], b[1 << 16];
    struct sealfs_error err;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    int ok = 1;
    for (off_t off = 0; ok && off < size;) {
        ssize_t n = sealfs_pread(f, a, sizeof a, (uint64_t)off, &err);
        ssize_t m = pread(fd, b, sizeof b, off);
        if (n <= 0 || n != m || memcmp(a, b, (size_t)n) != 0) ok = 0;
        else off += n;
    }
    close(fd);
    return ok;
}

static void compare_xattrs(const char *rel, const char *path) {
    char want[65536], got[65536], v1[65536], v2[65536];
    struct sealfs_error err;
    ssize_t n = llistxattr(path, want, sizeof want);
    ssize_t m = sealfs_listxattr(img, rel, got, sizeof got, SEALFS_NOFOLLOW, &err);
    if (n < 0 || m != n) {
        PROBLEM("%s: xattr names: %zd bytes in source, %zd in image (%s)", rel, n, m, m < 0 ? err.message : "");
        return;
    }
    for (char *name = want; name < want + n; name += strlen(name) + 1) {
        ssize_t a = lgetxattr(path, name, v1, sizeof v1);
        ssize_t need = sealfs_getxattr(img, rel, name, NULL, 0, SEALFS_NOFOLLOW, &err);
        ssize_t b = sealfs_getxattr(img, rel, name, v2, sizeof v2, SEALFS_NOFOLLOW, &err);
        if (a < 0 || a != b || need != b || memcmp(v1, v2, (size_t)a) != 0)
            PROBLEM("%s: xattr %s differs", rel, name);
    }
}

static void compare_dir(const char *rel, const char *path, nlink_t *subdirs) {
    struct sealfs_dir *d;
    struct sealfs_dirent e;
    struct sealfs_error err;
    size_t in_image = 0, in_source = 0;
    *subdirs = 0;
    if (sealfs_opendir(img, rel, &d, &err) != 0) {
        PROBLEM("%s: opendir: %s", rel, err.message);
        return;
    }
    while (sealfs_readdir(d, &e, &err) == 1) {
        char child[8448], crel[8448];
        struct stat st;
        struct sealfs_stat ist;
        in_image++;
        snprintf(child, sizeof child, "%s/%s", path, e.name);
        snprintf(crel, sizeof crel, "%s/%s", strcmp(rel, "/") ? rel : "", e.name);
        if (lstat(child, &st) != 0) {
            PROBLEM("%s: in the image, not in the source", crel);
            continue;
        }
        unsigned dt = S_ISREG(st.st_mode) ? DT_REG : S_ISDIR(st.st_mode) ? DT_DIR
                    : S_ISLNK(st.st_mode) ? DT_LNK : S_ISCHR(st.st_mode) ? DT_CHR
                    : S_ISBLK(st.st_mode) ? DT_BLK : S_ISFIFO(st.st_mode) ? DT_FIFO : DT_SOCK;
        if (e.file_type != dt || e.name_len != strlen(e.name)) PROBLEM("%s: entry type", crel);
        if (sealfs_lstat(img, crel, &ist, &err) != 0 || ist.ino != e.ino)
            PROBLEM("%s: entry inode", crel);
        if (S_ISDIR(st.st_mode)) (*subdirs)++;
    }
    sealfs_closedir(d);
    DIR *sd = opendir(path);
    struct dirent *de;
    while (sd && (de = readdir(sd)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) in_source++;
    if (sd) closedir(sd);
    if (in_image != in_source) PROBLEM("%s: %zu entries in the image, %zu in the source", rel, in_image, in_source);
}

/* Issue 38, item 20: `rel` with a suffix that makes POSIX require a directory ("/", "/.", "/..")
 * resolves as the kernel resolves `path` with it: the same success, or the same errno, for stat
 * and lstat. Symlinks are left out: the kernel would follow them on the host. */
static void compare_posix_suffixes(const char *rel, const char *path) {
    static const char *const suffixes[] = {"/", "/.", "/..", "//", "/./"};
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
        char r[8192], p[8192];
        snprintf(r, sizeof r, "%s%s", rel, suffixes[i]);
        snprintf(p, sizeof p, "%s%s", path, suffixes[i]);
        for (int l = 0; l < 2; l++) {
            struct stat st;
            struct sealfs_stat ist;
            struct sealfs_error err;
            int want = (l ? lstat(p, &st) : stat(p, &st)) == 0 ? 0 : errno;
            int got = (l ? sealfs_lstat(img, r, &ist, &err) : sealfs_stat(img, r, &ist, &err)) == 0 ? 0 : err.code;
            /* "/.." of the source's top is outside it; elsewhere both are the parent. */
            if (got != want && !(strcmp(rel, "/") == 0))
                PROBLEM("%s(\"%s\"): sealfs gives %s, the kernel %s", l ? "lstat" : "stat", r,
                        got ? strerror(got) : "success", want ? strerror(want) : "success");
        }
    }
}

static int visit(const char *path, const struct stat *st, int kind, struct FTW *ftw) {
    (void)kind, (void)ftw;
    char rel[8192];
    struct sealfs_stat ist;
    struct sealfs_error err;
    snprintf(rel, sizeof rel, "%s", path[src_len] ? path + src_len : "/");
    /* Symlinks are left out: the kernel follows them on the host, the image within itself. */
    if (!S_ISLNK(st->st_mode)) compare_posix_suffixes(rel, path);
    if (sealfs_lstat(img, rel, &ist, &err) != 0) {
        PROBLEM("%s: lstat: %s", rel, err.message);
        return 0;
    }
    if (ist.mode != st->st_mode || ist.uid != st->st_uid || ist.gid != st->st_gid ||
        ist.mtime != st->st_mtim.tv_sec || ist.mtime_nsec != st->st_mtim.tv_nsec)
        PROBLEM("%s: mode, owner or mtime differ", rel);
    if (S_ISDIR(st->st_mode)) {
        nlink_t subdirs;
        compare_dir(rel, path, &subdirs);
        if (ist.nlink != 2 + subdirs) PROBLEM("%s: nlink %u, expected %lu", rel, ist.nlink, 2 + (unsigned long)subdirs);
    } else {
        if (ist.size != (uint64_t)st->st_size || ist.nlink != st->st_nlink) PROBLEM("%s: size or nlink differ", rel);
    }
    if ((S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) &&
        (ist.rdev_major != major(st->st_rdev) || ist.rdev_minor != minor(st->st_rdev) || ist.rdev != st->st_rdev))
        PROBLEM("%s: device numbers differ", rel);
    if (S_ISLNK(st->st_mode)) {
        char want[4097], got[4097];
        ssize_t n = readlink(path, want, sizeof want - 1);
        ssize_t need = sealfs_readlink(img, rel, NULL, 0, &err);
        ssize_t m = sealfs_readlink(img, rel, got, sizeof got, &err);
        if (n < 0 || m != n || need != n || memcmp(want, got, (size_t)n) != 0 || got[m] != 0)
            PROBLEM("%s: symlink target differs", rel);
        if (n > 0 && (sealfs_readlink(img, rel, got, (size_t)n, &err) != -1 || errno != ERANGE || err.code != ERANGE))
            PROBLEM("%s: readlink into a buffer without room for the NUL is not ERANGE", rel);
    }
    if (S_ISREG(st->st_mode)) {
        struct sealfs_file *f;
        if (sealfs_file_open(img, rel, &f, &err) != 0) {
            PROBLEM("%s: open: %s", rel, err.message);
        } else {
            if (!same_content(f, path, st->st_size)) PROBLEM("%s: content differs", rel);
            struct sealfs_stat fs;
            if (sealfs_file_stat(f, &fs) != 0 || fs.ino != ist.ino || fs.size != ist.size)
                PROBLEM("%s: file_stat differs", rel);
            sealfs_file_close(f);
        }
        files = realloc(files, (nfiles + 1) * sizeof *files);
        files[nfiles++] = strdup(rel);
    }
    compare_xattrs(rel, path);
    return 0;
}

static void *reader(void *arg) {
    size_t t = (size_t)arg, bad = 0;
    char path[8192];
    for (size_t k = 0; k < nfiles; k++) {
        const char *rel = files[(k * 7 + t * 131) % nfiles];
        struct sealfs_file *f;
        struct sealfs_stat st;
        struct sealfs_error err;
        snprintf(path, sizeof path, "%s%s", src, rel);
        if (sealfs_file_open(img, rel, &f, &err) != 0) { bad++; continue; }
        sealfs_file_stat(f, &st);
        if (!same_content(f, path, (off_t)st.size)) bad++;
        sealfs_file_close(f);
        /* The shared handle, at an offset of this thread's own. */
        struct sealfs_stat big;
        sealfs_file_stat(shared, &big);
        char buf[5000], want[5000];
        uint64_t off = (k * 4099 + t * 65537) % (big.size + 1);
        int fd = open(shared_src, O_RDONLY);
        ssize_t n = sealfs_pread(shared, buf, sizeof buf, off, &err);
        ssize_t m = pread(fd, want, sizeof want, (off_t)off);
        close(fd);
        if (n != m || (n > 0 && memcmp(buf, want, (size_t)n) != 0)) bad++;
    }
    return (void *)bad;
}

static void expect_error(int rc, int code, const struct sealfs_error *err, const char *what) {
    if (rc != -1 || errno != code || err->code != code || err->message[0] == 0)
        PROBLEM("%s: expected -1 with errno %d, got %d, errno %d (%s)", what, code, rc, errno, err->message);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s IMAGE SOURCE_DIR DIGEST\n", argv[0]);
        return 2;
    }
    struct sealfs_error err;
    struct sealfs_open_options opts = {.digest = argv[3]};
    if (sealfs_open(argv[1], &opts, &img, &err) != 0) {
        fprintf(stderr, "sealfs_open: %s (errno %d)\n", err.message, err.code);
        return 1;
    }
    struct sealfs_trust trust;
    if (sealfs_get_trust(img, &trust) != 0 || trust.state != SEALFS_TRUST_AUTHENTICATED ||
        trust.authority != SEALFS_AUTHORITY_DIGEST || strcmp(trust.digest, argv[3]) != 0 ||
        trust.checker != SEALFS_CHECKER_READER)
        PROBLEM("trust: %s", trust.description);
    src = argv[2];
    src_len = strlen(src);
    if (nftw(src, visit, 64, FTW_PHYS) != 0) PROBLEM("nftw failed");
    printf("compared %zu regular files and their tree\n", nfiles);

    /* The errors. */
    struct sealfs_stat st;
    struct sealfs_image *other;
    char buf[4];
    expect_error(sealfs_stat(img, "/no/such/path", &st, &err), ENOENT, &err, "stat of a missing path");
    /* As stat("") (issue 38, item 20): the empty path names nothing, it is not the root. */
    expect_error(sealfs_stat(img, "", &st, &err), ENOENT, &err, "stat of the empty path");
    struct sealfs_dir *d;
    expect_error(sealfs_opendir(img, files[0], &d, &err), ENOTDIR, &err, "opendir of a file");
    struct sealfs_file *f;
    expect_error(sealfs_file_open(img, "/", &f, &err), EISDIR, &err, "open of a directory");
    expect_error((int)sealfs_getxattr(img, "/", "user.no-such-attribute", buf, sizeof buf, 0, &err), ENODATA, &err, "an absent xattr");
    expect_error((int)sealfs_readlink(img, files[0], buf, sizeof buf, &err), EINVAL, &err, "readlink of a file");
    struct sealfs_open_options wrong = {.digest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"};
    expect_error(sealfs_open(argv[1], &wrong, &other, &err), EKEYREJECTED, &err, "open with another digest");
    expect_error(sealfs_open("/no/such/image", NULL, &other, &err), ENOENT, &err, "open of a missing image");

    /* 8 threads, one image handle, one shared file handle. */
    size_t largest = 0;
    uint64_t most = 0;
    for (size_t i = 0; i < nfiles; i++)
        if (sealfs_stat(img, files[i], &st, &err) == 0 && st.size >= most) most = st.size, largest = i;
    if (sealfs_file_open(img, files[largest], &shared, &err) != 0) PROBLEM("open: %s", err.message);
    shared_src = malloc(src_len + strlen(files[largest]) + 1);
    sprintf(shared_src, "%s%s", src, files[largest]);
    pthread_t threads[8];
    for (size_t t = 0; t < 8; t++) pthread_create(&threads[t], NULL, reader, (void *)t);
    for (size_t t = 0; t < 8; t++) {
        void *bad;
        pthread_join(threads[t], &bad);
        if (bad) PROBLEM("thread %zu: %zu reads differ", t, (size_t)bad);
    }
    printf("8 threads read %zu files each through one handle\n", nfiles);
    /* The image is closed before the file, which stays readable. */
    sealfs_close(img);
    if (sealfs_pread(shared, buf, 1, 0, &err) != (most > 0)) PROBLEM("a file after its image closed");
    sealfs_file_close(shared);
    free(shared_src);
    for (size_t i = 0; i < nfiles; i++) free(files[i]);
    free(files);
    printf("%s: %d problems (libsealfs %s)\n", argv[1], problems, sealfs_version());
    return problems ? 1 : 0;
}
