#!/usr/bin/env bash
# Installs the Debian 12 packages pdit builds and tests with. Nothing else is
# downloaded: no vendored code, no pip, no model weights.
#
#   scripts/setup.sh [--fuzz]     --fuzz: also clang and libFuzzer (scripts/fuzz.sh)
set -euo pipefail
packages=(
	build-essential cmake ninja-build pkg-config   # toolchain
	libdnnl-dev                                    # oneDNN 2.6: matrix products, convolutions
	libopenmpi-dev openmpi-bin                     # the MPI communicator
	libcjson-dev                                   # config.json and safetensors headers
	libpng-dev                                     # PNG output
	libavformat-dev libavcodec-dev libswscale-dev  # MP4 output (H.264 through Debian's libx264)
	ffmpeg                                         # the tests decode pdit's videos with it
	libutf8proc-dev                                # Unicode tables for the CLIP tokenizer
	libmicrohttpd-dev                              # pdit serve's HTTP server
	curl chromium                                  # the serve tests' clients: curl, a browser for the page
	iproute2 nftables                              # the hosts tests: namespaces, links, tc, packet loss
	python3 python3-numpy python3-regex            # the independent NumPy references in the tests
	python3-sentencepiece                          # the T5 tokenizer's reference in the tests
)
# Node for the OpenAI JavaScript SDK client (Debian's, unless a node is already there)
command -v npm > /dev/null || packages+=(nodejs npm)
if [ "${1:-}" = "--fuzz" ]; then
	packages+=(clang-14 libclang-rt-14-dev libomp-14-dev)  # libFuzzer targets, OpenMP for clang
fi
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# the serve tests' JavaScript clients (openai, puppeteer-core) from the npm
# registry into tests/js/node_modules, at the versions of its lock file
js_clients() {
	if [ ! -d tests/js/node_modules/openai ] || [ ! -d tests/js/node_modules/puppeteer-core ]; then
		echo "setup: npm clients for the serve tests (tests/js)"
		(cd tests/js && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --silent)
	fi
}
cd "$(dirname "$0")/.."
if [ ${#missing[@]} -eq 0 ]; then
	js_clients
	echo "setup: all packages present"
	exit 0
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
js_clients
