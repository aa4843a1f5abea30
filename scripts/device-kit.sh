#!/usr/bin/env bash
# Prepares devkit/ (ignored by git) for scripts/device-check.sh: the GPU
# machine has the CUDA toolkit and PyTorch but none of Debian's packages,
# so the build made here travels with the libraries it loads.
#
#   scripts/device-kit.sh        # builds build-device/ (CUDA on, FFmpeg and the HTTP service off), writes devkit/kit.tar.xz
#   scripts/device-kit.sh --emulated   # devkit-emu/: the same kit with the CUDA emulation's programs,
#                                      # for a rehearsal of the check here (KIT=devkit-emu scripts/device-check.sh)
#
# then, with the device tool: run scripts/device-check.sh carrying devkit.
# The kit holds pdit, the test programs the check runs, the CUDA module
# (libpdit-cuda.so, beside them), every shared library
# they load but glibc's, the CUDA driver's, the CUDA toolkit's and NCCL's
# (the machine has those: NCCL in PyTorch's nvidia-nccl wheel), and Open
# MPI's runtime (mpirun, the plugins one machine's processes use, PMIx),
# xz-compressed as one stream (the programs share most of their code). A
# device call carries at most 64 MiB, the tracked tree (its golden data) and
# the kit together: the script says what is left and fails when the kit
# does not fit.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-device
kit=devkit
emulated=""
case "${1:-}" in
	--emulated) emulated=1 kit=devkit-emu ;;
	"") ;;
	*) echo "usage: scripts/device-kit.sh [--emulated]" >&2; exit 2 ;;
esac
command -v nvcc > /dev/null || { echo "device-kit: nvcc is not on PATH (the CUDA toolkit is needed)" >&2; exit 1; }
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPDIT_WERROR=ON -DPDIT_CUDA=ON -DPDIT_VIDEO=OFF -DPDIT_SERVE=OFF > /dev/null
cmake --build "$dir" -j "$(nproc)"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
bins=(pdit tests/test_backend tests/test_flux_golden tests/test_pipeline_golden tests/test_wan_golden
	tests/test_wan_pipeline tests/test_wan_vae tests/test_wan_text tests/test_parallel tests/test_vae_parallel
	tests/test_fbcache tests/st_compare)
for b in "${bins[@]}"; do
	src=$dir/$b
	# a rehearsal's: the emulation's build of each, under the same name
	if [ -n "$emulated" ]; then
		case $b in
			tests/st_compare) ;;
			pdit) src=$dir/tests/pdit_emu ;;
			*) src=$dir/${b}_emu ;;
		esac
	fi
	cp "$src" "$stage/bin/$(basename "$b")"
done
# the CUDA backend's module, which the programs load from their own folder
# (the emulation's programs link their backend in)
[ -n "$emulated" ] || cp "$dir/libpdit-cuda.so" "$stage/bin/"
strip "$stage"/bin/* 2> /dev/null || true

# Open MPI as Debian lays it out under /usr, moved under the kit's root
# (OPAL_PREFIX and PMIX_INSTALL_PREFIX point there on the device)
ompi=/usr/lib/x86_64-linux-gnu/openmpi
pmix=/usr/lib/x86_64-linux-gnu/pmix2
mkdir -p "$stage/usr/lib/x86_64-linux-gnu" "$stage/usr/bin" "$stage/usr/share"
cp -a "$ompi" "$stage/usr/lib/x86_64-linux-gnu/"
[ -d "$pmix" ] && cp -a "$pmix" "$stage/usr/lib/x86_64-linux-gnu/"
rm -rf "$stage/usr/lib/x86_64-linux-gnu/openmpi/include" "$stage/usr/lib/x86_64-linux-gnu/pmix2/include" \
	"$stage/usr/lib/x86_64-linux-gnu/openmpi/lib/pkgconfig" "$stage/usr/lib/x86_64-linux-gnu/pmix2/lib/pkgconfig"
find "$stage/usr/lib/x86_64-linux-gnu" -name '*.a' -delete
cp /usr/bin/orterun /usr/bin/orted "$stage/usr/bin/"
ln -s orterun "$stage/usr/bin/mpirun"
cp -a /usr/share/openmpi "$stage/usr/share/"
# one machine's processes talk over shared memory and TCP (device-check.sh
# sets btl self,vader,tcp and pml ob1): the network fabrics' plugins, and
# the libraries only they load (libfabric, UCX, PSM, verbs), stay here
find "$stage/usr/lib/x86_64-linux-gnu/openmpi" -name '*.so*' | grep -E \
	'_(ucx|ofi|openib|psm2?|usnic|uct|portals4)\.so|mca_(mtl|spml|atomic|sshmem|scoll|memheap)_|common_(ucx|ofi|verbs)|libmpi_java|libompi_dbg' |
	xargs -r rm -f
[ -d /usr/share/pmix ] && cp -a /usr/share/pmix "$stage/usr/share/"

# every library any of them loads, but those the machine has
# glibc's own libraries must be the machine's (they go with its libc)
skip='/lib(c|m|mvec|pthread|dl|rt|resolv|util|anl|thread_db|BrokenLocale)\.so|/libnss_|ld-linux|libcuda\.so|libcudart|libcublas|libnccl|/libstdc\+\+|/libgcc_s'
find "$stage" -type f \( -name '*.so*' -o -perm -u+x \) | while read -r f; do
	file -b "$f" | grep -q ELF || continue
	ldd "$f" 2> /dev/null | awk '/=> \// {print $3}'
done | sort -u | grep -v -E "$skip" | while read -r lib; do
	cp -nL "$lib" "$stage/lib/"
done

rm -rf "$kit"
mkdir -p "$kit"
# one thread, one stream, a 64 MiB dictionary: the twelve programs' shared
# code compresses once; the x86 filter (branch targets made absolute) takes
# 8% more off, code being most of it (10.4 MiB to 9.5 on 2026-12-01); xz
# and Python's tarfile both undo it
tar -C "$stage" -cf - . | xz -T1 --x86 --lzma2=preset=9e > "$kit/kit.tar.xz"
git describe --always --dirty > "$kit/commit" 2> /dev/null || true
if [ -n "$emulated" ]; then
	touch "$kit/emulated"
	echo "device-kit: $kit/kit.tar.xz, the emulation's programs: KIT=$kit scripts/device-check.sh conformance golden meshes"
	exit 0
fi
# the newest glibc any of it needs: the GPU machine's must be as new
need=$(find "$stage" -type f \( -name '*.so*' -o -perm -u+x \) -exec objdump -T {} + 2> /dev/null |
	grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1)
echo "device-kit: the kit needs glibc ${need#GLIBC_} or newer (device-check.sh prints the machine's)"
# what travels with it: the tracked files and those git does not ignore
tree=$( (git ls-files -z; git ls-files -z -o --exclude-standard) | { LC_ALL=C xargs -0 -r du -cb 2> /dev/null || true; } |
	awk '/\ttotal$/ {s += $1} END {print s + 0}')
size=$(du -b "$kit/kit.tar.xz" | cut -f1)
limit=$((64 << 20))
echo "device-kit: $kit/kit.tar.xz: $((size >> 10)) KiB; with the working tree ($((tree >> 20)) MiB) $(((size + tree) >> 20)) of the $((limit >> 20)) MiB a device call carries"
if [ $((size + tree)) -gt $limit ]; then
	echo "device-kit: too large by $(((size + tree - limit) >> 10)) KiB; the largest parts (uncompressed):" >&2
	du -ab "$stage" | sort -rn | awk 'NR > 1 && NR <= 13 {printf "  %8d KiB %s\n", $1 / 1024, $2}' >&2
	exit 1
fi
echo "device-kit: carry \"$kit\" to scripts/device-check.sh"
