// Of NEW's 4 KiB blocks (its first LEN bytes, the EROFS image without its seal) that are no
// 4 KiB-aligned block of OLD (what `sealfs pull --base OLD` cannot reuse), how many are in OLD at
// some other byte offset (what a tool matching at any offset, as zsync does, can reuse)?
//
//     cc -O2 -o /tmp/unaligned_blocks bench/unaligned_blocks.c && /tmp/unaligned_blocks OLD NEW LEN
//
// A Rabin-Karp hash of every 4 KiB window of OLD, looked up among the unmatched blocks' hashes,
// each hit compared byte for byte. (issue 41; docs/benchmarks.md, "Updates: the packed inode in
// the old image's order".)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLK 4096
#define SLOTS (1u << 22)
#define BASE 1099511628211ULL

struct slot { uint64_t hash; size_t block; int used; };
static struct slot table[SLOTS];

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len ? *len : 1);
    if (!b || fread(b, 1, *len, f) != *len) { fprintf(stderr, "%s: cannot read\n", path); exit(2); }
    fclose(f);
    return b;
}

static uint64_t hash_block(const unsigned char *p) {
    uint64_t h = 0;
    for (int i = 0; i < BLK; i++) h = h * BASE + p[i] + 1;
    return h;
}

static int cmp_block(const void *a, const void *b) {
    return memcmp(*(unsigned char *const *)a, *(unsigned char *const *)b, BLK);
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s OLD NEW LEN\n", argv[0]); return 2; }
    size_t old_len, new_len, len = strtoull(argv[3], NULL, 10);
    unsigned char *old = read_file(argv[1], &old_len), *new = read_file(argv[2], &new_len);
    if (len > new_len) len = new_len;
    if (old_len < BLK) { fprintf(stderr, "OLD is shorter than a block\n"); return 2; }
    // OLD's aligned blocks, sorted, to look NEW's up in.
    size_t old_blocks = old_len / BLK;
    unsigned char **sorted = malloc(old_blocks * sizeof *sorted);
    for (size_t i = 0; i < old_blocks; i++) sorted[i] = old + i * BLK;
    qsort(sorted, old_blocks, sizeof *sorted, cmp_block);
    size_t blocks = len / BLK, unmatched = 0, elsewhere = 0;
    for (size_t i = 0; i < blocks; i++) {
        unsigned char *b = new + i * BLK;
        if (bsearch(&b, sorted, old_blocks, sizeof *sorted, cmp_block)) continue;
        unmatched++;
        uint64_t h = hash_block(b);
        size_t s = h & (SLOTS - 1);
        while (table[s].used && table[s].hash != h) s = (s + 1) & (SLOTS - 1);
        if (!table[s].used) table[s] = (struct slot){h, i, 1};
    }
    char *found = calloc(blocks ? blocks : 1, 1);
    uint64_t top = 1;  // BASE^(BLK-1): the weight of a window's first byte
    for (int i = 0; i < BLK - 1; i++) top *= BASE;
    uint64_t h = hash_block(old);
    for (size_t at = 0;; at++) {
        for (size_t s = h & (SLOTS - 1); table[s].used; s = (s + 1) & (SLOTS - 1)) {
            struct slot *t = &table[s];
            if (t->hash == h && !found[t->block] && !memcmp(old + at, new + t->block * BLK, BLK)) {
                found[t->block] = 1;
                elsewhere++;
            }
        }
        if (at + BLK >= old_len) break;
        h = (h - (uint64_t)(old[at] + 1) * top) * BASE + old[at + BLK] + 1;
    }
    printf("blocks %zu; not an aligned block of OLD %zu; of those, in OLD at another offset %zu\n",
           blocks, unmatched, elsewhere);
    return 0;
}
