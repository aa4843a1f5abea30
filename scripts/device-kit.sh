#!/usr/bin/env bash
# Prepares devkit/ (ignored by git) for scripts/device-check.sh: the GPU
# machine has the CUDA toolkit and PyTorch but none of Debian's packages,
# so the build made here travels with the libraries it loads.
#
#   scripts/device-kit.sh        # builds build-device/ (CUDA on, FFmpeg off), writes devkit/kit.tar.xz
#
# then, with the device tool: run scripts/device-check.sh carrying devkit.
# The kit holds pdit, the test programs the check runs, every shared library
# they load but glibc's, the CUDA driver's and the CUDA toolkit's (the
# machine has those), and Open MPI's runtime (mpirun, its plugins, PMIx),
# xz-compressed: about 15 MB, so that it and the working tree stay under
# the 64 MiB a device call carries.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-device
kit=devkit
command -v nvcc > /dev/null || { echo "device-kit: nvcc is not on PATH (the CUDA toolkit is needed)" >&2; exit 1; }
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPDIT_WERROR=ON -DPDIT_CUDA=ON -DPDIT_VIDEO=OFF > /dev/null
cmake --build "$dir" -j "$(nproc)"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
bins=(pdit tests/test_backend tests/test_flux_golden tests/test_pipeline_golden tests/test_wan_golden
	tests/test_wan_pipeline tests/test_wan_vae tests/test_wan_text tests/test_parallel tests/test_vae_parallel
	tests/test_fbcache tests/st_compare)
for b in "${bins[@]}"; do
	cp "$dir/$b" "$stage/bin/"
done
strip "$stage"/bin/* 2> /dev/null || true

# Open MPI as Debian lays it out under /usr, moved under the kit's root
# (OPAL_PREFIX and PMIX_INSTALL_PREFIX point there on the device)
ompi=/usr/lib/x86_64-linux-gnu/openmpi
pmix=/usr/lib/x86_64-linux-gnu/pmix2
mkdir -p "$stage/usr/lib/x86_64-linux-gnu" "$stage/usr/bin" "$stage/usr/share"
cp -a "$ompi" "$stage/usr/lib/x86_64-linux-gnu/"
[ -d "$pmix" ] && cp -a "$pmix" "$stage/usr/lib/x86_64-linux-gnu/"
rm -rf "$stage/usr/lib/x86_64-linux-gnu/openmpi/include" "$stage/usr/lib/x86_64-linux-gnu/pmix2/include"
cp /usr/bin/orterun /usr/bin/orted "$stage/usr/bin/"
ln -s orterun "$stage/usr/bin/mpirun"
cp -a /usr/share/openmpi "$stage/usr/share/"
[ -d /usr/share/pmix ] && cp -a /usr/share/pmix "$stage/usr/share/"

# every library any of them loads, but those the machine has
skip='/libc\.so|/libm\.so|/libpthread|/libdl\.so|/librt\.so|ld-linux|libcuda\.so|libcudart|libcublas|/libstdc\+\+|/libgcc_s'
find "$stage" -type f \( -name '*.so*' -o -perm -u+x \) | while read -r f; do
	file -b "$f" | grep -q ELF || continue
	ldd "$f" 2> /dev/null | awk '/=> \// {print $3}'
done | sort -u | grep -v -E "$skip" | while read -r lib; do
	cp -nL "$lib" "$stage/lib/"
done

rm -rf "$kit"
mkdir -p "$kit"
tar -C "$stage" -cf - . | xz -T0 -6 > "$kit/kit.tar.xz"
git rev-parse HEAD > "$kit/commit" 2> /dev/null || true
echo "device-kit: $kit/kit.tar.xz ($(du -h "$kit/kit.tar.xz" | cut -f1)); carry \"$kit\" to scripts/device-check.sh"
