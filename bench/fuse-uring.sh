#!/usr/bin/env bash
# fuse-uring.sh - does FUSE-over-io_uring make a FUSE round trip cheaper on this host?
#
# What it measures
#   libfuse's own example daemons (low-level `passthrough_hp`, and the high-level
#   `passthrough` for the full-tree walks; libfuse >= 3.18) are mounted over a
#   source directory twice per round: once over the classic
#   /dev/fuse read()/writev() transport ("classic") and once with FUSE-over-io_uring
#   ("uring", `-o io_uring`, kernel module parameter enable_uring=Y).  The modes are
#   interleaved (order flips every round), every measurement gets a fresh mount,
#   and every (mode, workload) run is serialized with other benchmarks through
#   `flock /tmp/sealfs-bench.lock`.  Workloads:
#     stat        STAT_N x stat("<mnt>/Makefile"), mount --nocache (attr/entry
#                 timeout 0).  Each stat() = 3 daemon round trips
#                 (GETATTR root for default_permissions, LOOKUP, GETATTR).
#     fstat       STAT_N x fstat(fd) of the same file, --nocache: 1 GETATTR each.
#     lsR         `ls -lR` of the whole linux source tree (~84k entries) through the
#                 high-level example `passthrough --plus -o auto_cache` (readdirplus,
#                 libfuse default entry/attr timeouts of 1 s).
#     lsR_nocache same, without auto_cache: passthrough.c then sets entry/attr/negative
#                 timeouts to 0, so every path component lookup reaches the daemon.
#     lsR_hp      `ls -lR` of HP_TREE (default linux-source-6.1/arch, ~17.7k entries)
#                 through passthrough_hp with its defaults (timeouts 86400 s,
#                 readdirplus).  passthrough_hp (and passthrough_ll) keep one O_PATH fd
#                 per inode the kernel knows, and in this container RLIMIT_NOFILE is
#                 capped at 20000 (raising the hard limit -> EPERM), so they cannot
#                 serve the full 84k-entry tree with caching ("Reached maximum number
#                 of file descriptors"); hence the high-level daemon above for it.
#     seqread     dd bs=1M of big/linux.tar (1.36 GB), --nopassthrough so READs go
#                 through the daemon (otherwise the kernel's backing-file
#                 passthrough would bypass it).  Source page cache is warmed first.
#                 Classic replies with splice (passthrough_hp default); uring copies
#                 into the ring's registered payload buffer.
#   Recorded per run: wall time of the client, per-op time, daemon user+sys CPU
#   (delta of /proc/<pid>/stat utime/stime over the workload), and for uring the
#   number of CQEs the daemon consumed (sum of CqTail in /proc/<pid>/fdinfo of its
#   io_uring fds = requests delivered through the rings).  Each run also checks the
#   transport: uring runs must show one anon_inode:[io_uring] fd per CPU in the
#   daemon (libfuse 3.18 uses one queue per CPU, q-depth 8, one "fuse-ring-N"
#   thread per queue that handles its requests inline); classic runs must show none.
#   classic uses passthrough_hp's default fuse_session_loop_mt (workers are
#   spawned on demand, max 10 threads; a serial client keeps ~1 busy).
#
# Where the binaries come from
#   LIBFUSE_PREFIX (default /work/tmp/uring/prefix) must hold
#     lib/x86_64-linux-gnu/libfuse3.so.4 and libexec/passthrough_hp.
#   Build (what `fuse-uring.sh build <libfuse-source-dir>` does; tested with tag
#   fuse-3.18.2 = 033844748010a3b8265bf1c90b9ae8ffe4cd9ca7, Debian 12 packages
#   liburing-dev 2.3 (has IORING_SETUP_SQE128), libnuma-dev, meson, ninja-build):
#     meson setup build --prefix=$LIBFUSE_PREFIX -Denable-io-uring=true \
#           -Duseroot=false -Dtests=false -Dinitscriptdir= -Dudevrulesdir=$LIBFUSE_PREFIX/udev
#     ninja -C build install          # meson summary must say "io_uring support: YES"
#     install -m755 build/example/passthrough_hp build/example/passthrough $LIBFUSE_PREFIX/libexec/
#   Kernel: needs CONFIG_FUSE_IO_URING (6.14+); /sys/module/fuse/parameters/enable_uring
#   is set to Y only around uring runs and restored (trap) at exit.
#
# Usage (root):  bench/fuse-uring.sh            # full run, CSV in bench/results/
#   env: ROUNDS=5 STAT_N=200000 WORKLOADS="stat fstat lsR lsR_nocache seqread"
#        MODES="classic uring" WORK=/work/tmp/uring/run CORPUS=bench/.corpus
#        RESULTS_DIR=bench/results
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
LIBFUSE_PREFIX=${LIBFUSE_PREFIX:-/work/tmp/uring/prefix}
WORK=${WORK:-/work/tmp/uring/run}
ROUNDS=${ROUNDS:-5}
STAT_N=${STAT_N:-200000}
CORPUS=${CORPUS:-$HERE/.corpus}
WORKLOADS=${WORKLOADS:-"stat fstat lsR lsR_nocache lsR_hp seqread"}
MODES=${MODES:-"classic uring"}
LOCK=/tmp/sealfs-bench.lock
PARAM=/sys/module/fuse/parameters/enable_uring
HP=$LIBFUSE_PREFIX/libexec/passthrough_hp
HL=$LIBFUSE_PREFIX/libexec/passthrough
MNT=$WORK/mnt
RESULTS_DIR=${RESULTS_DIR:-$HERE/results}
TREE=$CORPUS/linux
STAT_DIR=$TREE/linux-source-6.1
HP_TREE=${HP_TREE:-$STAT_DIR/arch}
BIG_DIR=$CORPUS/big
BIG_FILE=linux.tar
export LD_LIBRARY_PATH=$LIBFUSE_PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

die() { echo "fuse-uring: $*" >&2; exit 1; }

# ---------------------------------------------------------------- build helper
if [[ ${1:-} == build ]]; then
	src=${2:?usage: $0 build <libfuse-source-dir>}
	cd "$src"
	meson setup build --prefix="$LIBFUSE_PREFIX" -Denable-io-uring=true \
		-Duseroot=false -Dtests=false -Dinitscriptdir= \
		-Dudevrulesdir="$LIBFUSE_PREFIX/udev"
	grep -q '^#define HAVE_URING' build/fuse_config.h || die "libfuse configured without io_uring"
	ninja -C build install
	install -D -m755 build/example/passthrough_hp "$LIBFUSE_PREFIX/libexec/passthrough_hp"
	install -D -m755 build/example/passthrough "$LIBFUSE_PREFIX/libexec/passthrough"
	exit 0
fi

# ---------------------------------------------------------------- one measured run
# __one MODE WORKLOAD ROUND  (runs under flock; prints one CSV row on stdout)
if [[ ${1:-} == __one ]]; then
	mode=$2 wl=$3 round=$4
	# daemon: passthrough_hp (low-level, holds an O_PATH fd per inode) or, for the
	# full-tree walks, the high-level path-based `passthrough` (no per-inode fds;
	# mounts / and the tree is reached at $MNT$TREE).
	d=$HP dir=$MNT
	case $wl in
	stat | fstat) args=(--foreground --nocache "$STAT_DIR") ;;
	lsR) d=$HL args=(-f --plus -o auto_cache) dir=$MNT$TREE ;;
	lsR_nocache) d=$HL args=(-f --plus) dir=$MNT$TREE ;;
	lsR_hp) args=(--foreground "$HP_TREE") ;;
	seqread) args=(--foreground --nopassthrough "$BIG_DIR") ;;
	*) die "unknown workload $wl" ;;
	esac
	if [[ $mode == uring ]]; then
		echo Y >"$PARAM"
		args+=(-o io_uring)
	else
		echo N >"$PARAM"
	fi
	log=$WORK/logs/$round-$mode-$wl.log
	"$d" "${args[@]}" "$MNT" >"$log" 2>&1 &
	pid=$!
	cleanup_one() {
		if grep -q " $MNT fuse" /proc/mounts; then umount "$MNT" 2>/dev/null || umount -l "$MNT"; fi
		if kill -0 "$pid" 2>/dev/null; then kill "$pid"; fi
		wait "$pid" 2>/dev/null || true
	}
	trap cleanup_one EXIT
	for _ in $(seq 100); do
		grep -q " $MNT fuse" /proc/mounts && break
		kill -0 "$pid" 2>/dev/null || die "daemon died: $(cat "$log")"
		sleep 0.05
	done
	grep -q " $MNT fuse" /proc/mounts || die "mount did not appear"
	sleep 0.3 # let ring threads register
	rings=()
	for fd in /proc/$pid/fd/*; do
		[[ $(readlink "$fd" 2>/dev/null) == 'anon_inode:[io_uring]' ]] && rings+=("${fd##*/}")
	done
	nq=${#rings[@]}
	if [[ $mode == uring && $nq -ne $(nproc) ]]; then die "uring mode but daemon has $nq io_uring fds (log: $(head -c 2000 "$log"))"; fi
	if [[ $mode == classic && $nq -ne 0 ]]; then die "classic mode but daemon has io_uring fds"; fi
	cqes() { local s=0 f v; for f in "${rings[@]}"; do v=$(awk '/^CqTail:/{print $2}' /proc/$pid/fdinfo/$f); s=$((s + v)); done; echo $s; }
	cpu() { awk '{print $14, $15}' /proc/$pid/stat; } # utime stime in ticks (includes all threads)
	read -r u0 s0 < <(cpu)
	c0=$(cqes)
	t0=$(date +%s%N)
	case $wl in
	stat) out=$("$WORK/statstorm" stat "$MNT/Makefile" "$STAT_N"); ops=$STAT_N ;;
	fstat) out=$("$WORK/statstorm" fstat "$MNT/Makefile" "$STAT_N"); ops=$STAT_N ;;
	lsR | lsR_nocache) ls -lR "$dir" >/dev/null; ops=$(cat "$WORK/tree_entries") ;;
	lsR_hp) ls -lR "$dir" >/dev/null; ops=$(cat "$WORK/hp_tree_entries") ;;
	seqread) dd if="$MNT/$BIG_FILE" of=/dev/null bs=1M status=none; ops=$(stat -c %s "$BIG_DIR/$BIG_FILE") ;;
	esac
	t1=$(date +%s%N)
	read -r u1 s1 < <(cpu)
	c1=$(cqes)
	tck=$(getconf CLK_TCK)
	if [[ $wl == stat || $wl == fstat ]]; then
		# statstorm's own timing excludes process start-up; prefer it
		el_ns=$(awk '{print $2}' <<<"$out")
	else
		el_ns=$((t1 - t0))
	fi
	ring_req=$([[ $mode == uring ]] && echo $((c1 - c0)) || echo "")
	awk -v r="$round" -v m="$mode" -v w="$wl" -v ops="$ops" -v ns="$el_ns" -v u=$((u1 - u0)) \
		-v s=$((s1 - s0)) -v t="$tck" -v nq="$nq" -v rq="$ring_req" 'BEGIN{
		per = (w == "seqread") ? sprintf("%.1f", ops / (ns / 1e9) / 1048576) : sprintf("%.3f", ns / 1000 / ops);
		printf "%s,%s,%s,%d,%.4f,%s,%.2f,%.2f,%d,%s\n", r, m, w, ops, ns / 1e9, per, u / t, s / t, nq, rq }'
	exit 0
fi

# ---------------------------------------------------------------- driver
[[ $(id -u) -eq 0 ]] || die "run as root"
[[ -x $HP && -x $HL ]] || die "$HP or $HL missing (see header: build step)"
[[ -w $PARAM ]] || die "$PARAM not writable (kernel without CONFIG_FUSE_IO_URING?)"
[[ -d $STAT_DIR && -f $BIG_DIR/$BIG_FILE ]] || die "corpus missing under $CORPUS"
grep -q " $MNT fuse" /proc/mounts && die "$MNT already mounted"
ORIG_PARAM=$(cat "$PARAM")
restore() { echo "$ORIG_PARAM" >"$PARAM" || true; grep -q " $MNT fuse" /proc/mounts && umount -l "$MNT" || true; }
trap restore EXIT
trap 'exit 130' INT TERM

mkdir -p "$WORK/logs" "$MNT" "$RESULTS_DIR"
cat >"$WORK/statstorm.c" <<'EOF'
/* statstorm stat|fstat PATH N: time N stat()/fstat() calls; prints "N ns ns_per_call" */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
int main(int argc, char **argv) {
	if (argc < 4) { fprintf(stderr, "usage: %s stat|fstat PATH N\n", argv[0]); return 2; }
	int f = !strcmp(argv[1], "fstat"); long n = atol(argv[3]); struct stat st; struct timespec a, b;
	int fd = open(argv[2], O_RDONLY);
	if (fd < 0) { perror("open"); return 1; }
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		if ((f ? fstat(fd, &st) : stat(argv[2], &st))) { perror("stat"); return 1; }
	clock_gettime(CLOCK_MONOTONIC, &b);
	double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
	printf("%ld %.0f %.1f\n", n, ns, ns / n);
	return 0;
}
EOF
cc -O2 -o "$WORK/statstorm" "$WORK/statstorm.c"

echo "warming page cache of the sources..." >&2
find "$TREE" | wc -l >"$WORK/tree_entries"
find "$HP_TREE" | wc -l >"$WORK/hp_tree_entries"
(($(cat "$WORK/hp_tree_entries") + 500 < $(ulimit -Hn))) || die "HP_TREE too big for RLIMIT_NOFILE $(ulimit -Hn)"
ls -lR "$TREE" >/dev/null
cat "$BIG_DIR/$BIG_FILE" >/dev/null

STAMP=$(date -u +%Y-%m-%dT%H%M%SZ)
CSV=$RESULTS_DIR/fuse-uring-$STAMP.csv
echo "round,mode,workload,ops,elapsed_s,per_op,daemon_user_s,daemon_sys_s,io_uring_queues,ring_requests" >"$CSV"
echo "# libfuse $(basename "$(readlink -f "$LIBFUSE_PREFIX/lib/x86_64-linux-gnu/libfuse3.so.4")"), kernel $(uname -r), $(nproc) CPUs; per_op = us/op (MiB/s for seqread)" >&2
for r in $(seq "$ROUNDS"); do
	order=$MODES
	((r % 2 == 0)) && order=$(echo "$MODES" | tr ' ' '\n' | tac | tr '\n' ' ')
	for wl in $WORKLOADS; do
		for m in $order; do
			row=$(flock "$LOCK" "$0" __one "$m" "$wl" "$r")
			echo "$row" | tee -a "$CSV" >&2
		done
	done
done

# summary: median (min-max) of per_op and daemon CPU per (workload, mode)
python3 - "$CSV" <<'EOF' >&2
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print(f"\n{'workload':12} {'mode':8} {'per_op median (min-max)':>30} {'daemon cpu s (u+s) median':>26}")
for w in dict.fromkeys(r['workload'] for r in rows):
    for m in dict.fromkeys(r['mode'] for r in rows):
        sel = [r for r in rows if r['workload'] == w and r['mode'] == m]
        if not sel: continue
        p = [float(r['per_op']) for r in sel]
        c = [float(r['daemon_user_s']) + float(r['daemon_sys_s']) for r in sel]
        print(f"{w:12} {m:8} {statistics.median(p):14.3f} ({min(p):.3f}-{max(p):.3f}) {statistics.median(c):18.2f}")
print("results:", sys.argv[1])
EOF
