#!/usr/bin/env bash
# pdit plan on paper: FLUX.1-dev (its published transformer and VAE configs, in
# bench/configs) on 1-64 H100s, 8 a node over NVLink and InfiniBand between
# nodes, at 1024², 2048² and 4096²; then the meshes xDiT published FLUX
# figures for, predicted on the same hardware presets. Prints Markdown (the
# tables of docs/plan.md). Nothing is run but `pdit plan`: the figures are
# the cost model's on the presets' published peaks (--help lists them).
#
#   bench/plan_paper.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
dev=bench/configs/flux1-dev
schnell=bench/configs/flux1-schnell

# plan ARGS... -> JSON rows
plan() { "$pdit" plan --json "$@"; }
short() {
	local s
	s=$(sed -e 's/dp=1 //; s/cfg=1 //; s/pp=1 //; s/ring=1 //; s/ulysses=1 //; s/ tp=1$//; s/^tp=1$//' <<< "$1")
	echo "${s:-one GPU}"
}

for size in 1024 2048 4096; do
	echo
	echo "#### FLUX.1-dev ${size}², 28 steps, H100 (8 a node: NVLink within, InfiniBand NDR between)"
	echo
	echo "| GPUs | best exact mesh | s/step | 28 steps + decode, s | speed-up | GB/GPU | best with stale methods | s/step |"
	echo "|---:|---|---:|---:|---:|---:|---|---:|"
	one=""
	for n in 1 2 4 8 16 32 64; do
		rows=$(plan --model "$dev" --devices "$n" --device h100 --per-node 8 -H "$size" -W "$size" \
			--steps 28 | grep '"fits": true')
		exact=$(grep -m1 '"stale": false' <<< "$rows")
		any=$(head -1 <<< "$rows")
		s=$(field seconds_per_step "$exact")
		[ -n "$one" ] || one=$s
		printf "| %d | %s | %.4f | %.2f | %.1f× | %.1f | %s | %.4f |\n" "$n" "$(short "$(field mesh "$exact")")" \
			"$s" "$(field seconds_per_run "$exact")" "$(awk -v a="$one" -v b="$s" 'BEGIN { print a / b }')" \
			"$(field memory_gb "$exact")" "$(short "$(field mesh "$any")")" "$(field seconds_per_step "$any")"
	done
done

echo
echo "#### Next to xDiT's published FLUX figures (peers.md §2)"
echo
echo "| setting | mesh | xDiT, s | pdit plan, s | pdit: x of its 1 GPU | xDiT: x of its 1 GPU |"
echo "|---|---|---:|---:|---:|---:|"
# FLUX.1-dev 1024², 28 steps, 4x H100 (torch.compile figures)
rows=$(plan --model "$dev" --devices 1 --device h100 -H 1024 -W 1024 --steps 28)
base=$(field seconds_per_run "$(head -1 <<< "$rows")")
printf "| FLUX.1-dev 1024², 28 steps, H100 | 1 GPU | 4.30 | %.2f | 1.0 | 1.0 |\n" "$base"
rows2=$(plan --model "$dev" --devices 2 --device h100 -H 1024 -W 1024 --steps 28)
rows4=$(plan --model "$dev" --devices 4 --device h100 -H 1024 -W 1024 --steps 28)
for m in "ulysses=2:2.68" "ring=2:2.60" "ulysses=4:1.63" "ring=2 ulysses=2:1.80" "ring=4:1.98"; do
	mesh=${m%%:*} x=${m#*:}
	full="dp=1 cfg=1 pp=1 ring=1 ulysses=1 tp=1"
	for kv in $mesh; do full=$(sed "s/ ${kv%%=*}=1/ $kv/" <<< " $full" | sed 's/^ //'); done
	case $mesh in *=4*|"ring=2 ulysses=2") r=$rows4 ;; *) r=$rows2 ;; esac
	p=$(field seconds_per_run "$(row "$full" "$r")")
	printf "| | %s | %s | %.2f | %.1f | %.1f |\n" "$mesh" "$x" "$p" "$(awk -v a="$base" -v b="$p" 'BEGIN { print a / b }')" \
		"$(awk -v b="$x" 'BEGIN { print 4.30 / b }')"
done
# FLUX.1-schnell, 4 steps, 8x A100 over NVLink 3 (300 GB/s each way), Ulysses 8
for size in 1024:0.82 2048:2.4; do
	s=${size%%:*} x=${size#*:}
	r=$(plan --model "$schnell" --devices 8 --device a100 --bandwidth 300 -H "$s" -W "$s" --steps 4)
	p=$(field seconds_per_run "$(row "dp=1 cfg=1 pp=1 ring=1 ulysses=8 tp=1" "$r")")
	printf "| FLUX.1-schnell %s², 4 steps, 8× A100 NVLink | ulysses=8 | %s | %.2f | | |\n" "$s" "$x" "$p"
done
# FLUX.1-schnell 1024², 4 steps, L40 over PCIe: best 1.41 s with U2xR2 on 4 GPUs
r=$(plan --model "$schnell" --devices 4 --device l40 --link pcie -H 1024 -W 1024 --steps 4)
p=$(field seconds_per_run "$(row "dp=1 cfg=1 pp=1 ring=2 ulysses=2 tp=1" "$r")")
printf "| FLUX.1-schnell 1024², 4 steps, 4× L40 PCIe | ring=2 ulysses=2 | 1.41 | %.2f | | |\n" "$p"
r=$(plan --model "$schnell" --devices 8 --device l40 --link pcie -H 1024 -W 1024 --steps 4 | grep '"fits": true')
printf "| FLUX.1-schnell 1024², 4 steps, 8× L40 PCIe | plan's best: %s | slower than 4 | %.2f | | |\n" \
	"$(short "$(field mesh "$(grep -m1 '"stale": false' <<< "$r")")")" \
	"$(field seconds_per_run "$(grep -m1 '"stale": false' <<< "$r")")"
# FLUX.1-dev on 16 L40s in two nodes (PCIe within, Ethernet between) against 8 in one:
# xDiT reports 1.16x at 1024² (U4xPP4) and 1.9x at 4096² (U2xR2xPP4)
for size in 1024:1.16:"ulysses=4 pp=4" 4096:1.9:"ring=2 ulysses=2 pp=4"; do
	IFS=: read -r s x xm <<< "$size"
	r8=$(plan --model "$dev" --devices 8 --device l40 --link pcie -H "$s" -W "$s" --steps 28 | grep '"fits": true')
	r16=$(plan --model "$dev" --devices 16 --device l40 --per-node 8 --link pcie --inter-link ethernet -H "$s" -W "$s" \
		--steps 28 | grep '"fits": true')
	a=$(head -1 <<< "$r8") b=$(head -1 <<< "$r16")
	printf "| FLUX.1-dev %s², 16× L40 (2 nodes, Ethernet) over 8× L40 | xDiT %s; plan: %s over %s | %s× | %.2f× | | |\n" \
		"$s" "$xm" "$(short "$(field mesh "$b")")" "$(short "$(field mesh "$a")")" "$x" \
		"$(awk -v a="$(field seconds_per_run "$a")" -v b="$(field seconds_per_run "$b")" 'BEGIN { print a / b }')"
done
