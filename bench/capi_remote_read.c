/* bench/capi_remote_rss.py: reads PATH of the image at URL whole, in 1 MiB reads, through libsealfs.
   argv: URL DIGEST CACHE_DIR FLAGS PATH (FLAGS: sealfs_open_options::flags). */
#include <sealfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
  struct sealfs_open_options o; memset(&o, 0, sizeof o);
  o.digest = argv[2]; o.cache_dir = argv[3]; o.flags = atoi(argv[4]);
  struct sealfs_image *img; struct sealfs_error e;
  if (sealfs_open(argv[1], &o, &img, &e)) { fprintf(stderr, "open: %s\n", e.message); return 1; }
  struct sealfs_file *f;
  if (sealfs_file_open(img, argv[5], &f, &e)) { fprintf(stderr, "file: %s\n", e.message); return 1; }
  static char buf[1 << 20]; unsigned long long off = 0, sum = 0; ssize_t n;
  while ((n = sealfs_pread(f, buf, sizeof buf, off, &e)) > 0) { off += n; sum += (unsigned char)buf[0]; }
  if (n < 0) { fprintf(stderr, "read: %s\n", e.message); return 1; }
  sealfs_file_close(f); sealfs_close(img);
  printf("%llu\n", off);
  return 0;
}
