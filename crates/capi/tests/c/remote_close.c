/* Opens a remote image (a URL, through the default persistent cache), reads the first BYTES of
 * each PATH (a large file read sequentially has readahead fetching ahead of the reads, and many
 * files here and there start the background fill where it is on: both are still fetching when the
 * reads stop), closes and exits: nothing the image started may still run, or hold memory, once
 * the closes have returned. Twice: closing the files and then the image, and closing the image
 * while the last file is still open (the file's close is then the last). After each, the kernel
 * must list as many threads of the process as before the open (/proc/self/task). FLAGS are
 * `sealfs_open_options::flags`. Built by tests/c_library.rs and run under valgrind, which must
 * report no error and no leak.
 *
 *   remote_close URL DIGEST FLAGS BYTES PATH...
 */
#include <dirent.h>
#include <sealfs.h>
#include <stdio.h>
#include <stdlib.h>

/* The threads of this process, as the kernel lists them. */
static int threads(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static unsigned long long bytes;

static unsigned long long read_start(struct sealfs_file *f) {
    static char buf[1 << 16];
    struct sealfs_error err;
    unsigned long long total = 0;
    while (total < bytes) {
        ssize_t n = sealfs_pread(f, buf, sizeof buf, total, &err);
        if (n < 0) {
            fprintf(stderr, "sealfs_pread: %s\n", err.message);
            exit(1);
        }
        if (n == 0) return total;
        total += (unsigned long long)n;
    }
    return total;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: remote_close URL DIGEST FLAGS BYTES PATH...\n");
        return 2;
    }
    bytes = strtoull(argv[4], NULL, 10);
    struct sealfs_open_options opts = {.digest = argv[2], .flags = (unsigned)strtoul(argv[3], NULL, 0)};
    struct sealfs_error err;
    int before = threads();
    for (int round = 0; round < 2; round++) {
        struct sealfs_image *img;
        struct sealfs_file *f;
        if (sealfs_open(argv[1], &opts, &img, &err) != 0) {
            fprintf(stderr, "sealfs_open: %s\n", err.message);
            return 1;
        }
        unsigned long long total = 0;
        for (int i = 5; i < argc; i++) {
            if (sealfs_file_open(img, argv[i], &f, &err) != 0) {
                fprintf(stderr, "sealfs_file_open %s: %s\n", argv[i], err.message);
                return 1;
            }
            total += read_start(f);
            if (round == 1 && i == argc - 1) break; /* the last file stays open */
            sealfs_file_close(f);
        }
        if (round == 0) {
            printf("read %llu bytes\n", total);
            sealfs_close(img);
        } else {
            sealfs_close(img);
            total += read_start(f);
            printf("read %llu bytes, the last file again after sealfs_close\n", total);
            sealfs_file_close(f);
        }
        int after = threads();
        printf("threads: %d before sealfs_open, %d after the last close\n", before, after);
        if (after != before) {
            fprintf(stderr, "%d threads of the image outlive its last close\n", after - before);
            return 1;
        }
    }
    return 0;
}
