#!/usr/bin/env bash
# Installs the Debian 12 packages pdit needs. Nothing else is downloaded: no
# vendored code, no pip, no model weights.
#
#   scripts/setup.sh            what building and running pdit need
#   scripts/setup.sh --test     and what the test suite adds (scripts/test.sh
#                               and CI run this): Python with NumPy, ffmpeg,
#                               curl, Chromium, Node.js and the npm clients of
#                               the serve tests, the network tools of the hosts
#                               tests
#   scripts/setup.sh --fuzz     and clang with libFuzzer (scripts/fuzz.sh)
#   scripts/setup.sh --list [--test|--fuzz]   the packages, one a line; installs nothing
set -euo pipefail
test=0 fuzz=0 list=0
for a in "$@"; do
	case $a in
	--test) test=1 ;;
	--fuzz) fuzz=1 ;;
	--list) list=1 ;;
	-h | --help) sed -n '2,13s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) echo "setup: unknown option '$a' (--test, --fuzz, --list)" >&2; exit 2 ;;
	esac
done
packages=(
	build-essential cmake ninja-build pkg-config   # toolchain
	libdnnl-dev                                    # oneDNN 2.6: matrix products, convolutions
	libopenmpi-dev openmpi-bin                     # the MPI communicator
	libcjson-dev                                   # config.json and safetensors headers
	libpng-dev                                     # PNG output
	libjpeg62-turbo-dev                            # JPEG pictures in
	libavformat-dev libavcodec-dev libswscale-dev  # MP4 output (H.264 through Debian's libx264)
	libutf8proc-dev                                # Unicode tables for the CLIP tokenizer
	libmicrohttpd-dev                              # pdit serve's HTTP server
)
if [ $test = 1 ]; then
	packages+=(
		ffmpeg                                         # the tests decode pdit's videos with it
		curl chromium                                  # the serve tests' clients: curl, a browser for the page
		iproute2 nftables                              # the hosts tests: namespaces, links, tc, packet loss
		python3 python3-numpy python3-regex            # the independent NumPy references in the tests
		python3-pil                                    # Pillow: the resize reference (cli_resize)
		python3-sentencepiece                          # the T5 tokenizer's reference in the tests
	)
	# Node for the OpenAI JavaScript SDK client (Debian's, unless a node is already there)
	command -v npm > /dev/null || packages+=(nodejs npm)
fi
if [ $fuzz = 1 ]; then
	packages+=(clang-14 libclang-rt-14-dev libomp-14-dev)  # libFuzzer targets, OpenMP for clang
fi
if [ $list = 1 ]; then
	printf '%s\n' "${packages[@]}"
	exit 0
fi
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# the serve tests' JavaScript clients (openai, puppeteer-core) from the npm
# registry into tests/js/node_modules, at the versions of its lock file
js_clients() {
	[ $test = 1 ] || return 0
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
