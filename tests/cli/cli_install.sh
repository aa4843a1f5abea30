#!/usr/bin/env bash
# What a user installs: `cmake --install` into a temporary prefix puts the
# command, the public header, libpdit.so, a pkg-config file and a CMake
# package there; the installed pdit makes a picture, and so do the example
# program built against the installed header and library through
# pkg-config and through find_package(pdit). scripts/setup.sh installs for
# building and running only what they need; --test adds the tests' tools.
#
#   cli_install.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1 src=$2
build=$(cd "$build" && pwd) src=$(cd "$src" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# every file the checks write is the temporary folder's
cd "$tmp" || exit 1
fail=0
ok() { echo "  ok   $1"; }
bad() { echo "  FAIL $1"; fail=1; }

p=$tmp/prefix
if cmake --install "$build" --prefix "$p" > "$tmp/install.log" 2>&1; then ok "cmake --install --prefix"; else bad "cmake --install: $(tail -3 "$tmp/install.log")"; fi
for f in bin/pdit include/pdit/pdit.h include/pdit/pd_comm.h; do
	[ -e "$p/$f" ] && ok "installed $f" || bad "no $f under the prefix"
done
lib=$(find "$p" -name libpdit.so | head -1)
pc=$(find "$p" -name pdit.pc | head -1)
cfg=$(find "$p" -name pditConfig.cmake | head -1)
[ -n "$lib" ] && [ -n "$pc" ] && [ -n "$cfg" ] && ok "libpdit.so, pdit.pc and pditConfig.cmake" ||
	bad "library '$lib', pkg-config '$pc', CMake package '$cfg'"

# The library's interface is what the installed headers mark PD_API:
# exactly those names exported, each of them defined (a program linking one
# of them links), and no internal helper (pd_malloc, pd_fault) among them.
if [ -n "$lib" ] && command -v nm > /dev/null; then
	nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u > exported
	cat "$p"/include/pdit/*.h | tr -s ' \t\n' ' ' | grep -o 'PD_API [^(;]*' |
		sed 's/\[[^]]*\]$//' | grep -o 'pd_[a-z0-9_]*$' | sort -u > declared
	if [ -s declared ] && cmp -s exported declared && ! grep -qx 'pd_malloc\|pd_fault' exported; then
		ok "libpdit.so exports the $(wc -l < declared) names the installed headers mark PD_API, no others"
	else
		bad "exports against PD_API declarations: $(diff declared exported | grep '^[<>]' | head -8 | tr '\n' ' ')"
	fi
	# and every function the installed headers declare is one of them (a
	# declaration without PD_API compiles in a program and fails at its
	# link): the compiler lists the declarations, static inline ones aside
	for h in "$p"/include/pdit/*.h; do echo "#include <pdit/$(basename "$h")>"; done > all.c
	if ! cc -aux-info /dev/null -fsyntax-only -x c /dev/null 2> /dev/null; then
		echo "  skip the declarations' check: this cc has no -aux-info (GCC's)"
	elif cc -I"$p/include" -fsyntax-only -aux-info aux.txt all.c 2> aux.log; then
		grep -F "$p/include/" aux.txt | grep -v ' static ' | grep -o 'pd_[a-z0-9_]* *(' | tr -d ' (' |
			sort -u > functions
		missing=$(comm -23 functions exported | tr '\n' ' ')
		[ -s functions ] && [ -z "$missing" ] && ok "each of the $(wc -l < functions) functions the installed headers declare is exported" ||
			bad "declared in the installed headers, not exported: '$missing'"
	else
		bad "the installed headers do not compile alone: $(head -3 aux.log)"
	fi
fi

# the installed command, from another folder
if "$p/bin/pdit" tiny m --full > /dev/null 2>&1 &&
	"$p/bin/pdit" generate --model m -p "a red fox" -H 64 -W 64 --steps 2 -o fox.png -q &&
	[ "$(head -c 8 fox.png | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ]; then
	ok "the installed pdit makes a picture"
else
	bad "the installed pdit"
fi

# the CUDA module where the build has one: installed beside the library,
# and found from bin/ (no GPU here: it loads and counts none)
if "$p/bin/pdit" --version 2> /dev/null | grep -q '^backends: cpu, cuda'; then
	mod=$(find "$p" -name libpdit-cuda.so | head -1)
	"$p/bin/pdit" generate --model m -p "a red fox" -H 64 -W 64 --steps 2 -o cuda.png -q --backend cuda 2> cuda.err
	if [ -n "$mod" ] && [ "$(dirname "$mod")" = "$(dirname "$lib")" ] && grep -q "no CUDA device here" cuda.err; then
		ok "the installed pdit loads the installed CUDA module ($(cat cuda.err))"
	else
		bad "the CUDA module: '$mod'; $(cat cuda.err)"
	fi
fi

# the example program through pkg-config, nothing from the build tree
libdir=$(dirname "$lib")
if flags=$(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs pdit) &&
	cc -o ex "$src/examples/pdit_example.c" $flags 2> cc.log &&
	LD_LIBRARY_PATH=$libdir ./ex m pc "a red fox" > /dev/null 2>&1 && [ -s pc-0.ppm ]; then
	ok "a program built with pkg-config --cflags --libs pdit ($flags) makes a picture"
else
	bad "pkg-config build: ${flags:-no flags} $(cat cc.log 2> /dev/null | head -5)"
fi

# a C++ program including <pdit/pdit.h>, linked the same way: it opens no
# model, it must only build and call in (extern "C", thread_local)
cat > cxx.cc << 'CXX'
#include <pdit/pdit.h>
#include <cstdio>
int main()
{
	struct pd_engine_options o;
	struct pd_engine *e = nullptr;

	pd_engine_options_init(&o);
	o.model = "no-such-folder";
	struct pd_comm *world = nullptr;
	if (pd_comm_self_new(&world) || pd_engine_open(&e, world, &o, nullptr) == 0)
		return 1;
	std::printf("%s\n", pd_last_error());
	return pd_log_level == 1 ? 0 : 1;
}
CXX
if command -v g++ > /dev/null; then
	if g++ -std=c++17 -Wall -Wextra -o cxx cxx.cc $flags 2> cxx.log &&
		LD_LIBRARY_PATH=$libdir ./cxx > cxx.out 2>&1 && grep -q "no-such-folder" cxx.out; then
		ok "a C++ program includes <pdit/pdit.h> and calls the library: $(cat cxx.out)"
	else
		bad "C++: $(head -5 cxx.log) $(cat cxx.out 2> /dev/null)"
	fi
else
	ok "(no g++ here: the C++ build not tried)"
fi

# and through CMake's find_package
mkdir app
cp "$src/examples/pdit_example.c" app/
cat > app/CMakeLists.txt << 'CM'
cmake_minimum_required(VERSION 3.18)
project(app C)
find_package(pdit REQUIRED)
add_executable(ex pdit_example.c)
target_link_libraries(ex PRIVATE pdit::pdit)
CM
if cmake -S app -B app/build -DCMAKE_PREFIX_PATH="$p" > cm.log 2>&1 && cmake --build app/build > cm.log 2>&1 &&
	LD_LIBRARY_PATH=$libdir app/build/ex m cm "a red fox" > /dev/null 2>&1 && [ -s cm-0.ppm ] &&
	cmp -s pc-0.ppm cm-0.ppm; then
	ok "a program built with find_package(pdit) makes the same picture"
else
	bad "find_package build: $(tail -5 cm.log)"
fi

# setting up to use is not setting up to test
base=$("$src/scripts/setup.sh" --list | tr '\n' ' ')
full=$("$src/scripts/setup.sh" --list --test | tr '\n' ' ')
extra=""
for t in chromium nftables ffmpeg python3 curl; do
	case " $base " in *" $t "*) extra="$extra $t" ;; esac
done
case " $full " in *" chromium "*" python3 "*) has=1 ;; *) has=0 ;; esac
[ -z "$extra" ] && [ $has = 1 ] && case " $base " in *" libdnnl-dev "*" libmicrohttpd-dev "*) true ;; *) false ;; esac &&
	ok "scripts/setup.sh installs what building and running need; --test adds the tests' tools" ||
	bad "setup.sh: test tools in the base list:$extra (base: $base)"
exit $fail
