#!/usr/bin/env bash
# Pictures in, as a user runs them, against diffusers (tests/golden/edit-tiny):
#   img2img (-i/--init-img, --strength) on every img2img case, inpainting
#   with an ordinary FLUX model (--mask) on every inpaint case, and FLUX.1 Fill
#   (a transformer of Fill's channel layout, -i and --mask, its default strength
#   1) on the fill case: latents.final within 1e-4, the picture within 1 per
#   pixel, the strength in the PNG's parameters; with MPIRUN, Ulysses 2,
#   ring 2, tensor 2 and PipeFusion 2 equal to one process within 1e-5
#   (cli_edit_meshes: true CFG and 4-process meshes); Fill without --mask refused; FLUX.1 Kontext (-r/--ref-image, a
#   reference of another size) on the kontext case, the same tolerances, on
#   Ulysses 2, ring 2, tensor 2 and PipeFusion 2 equal to one process;
#   a picture and mask of another size than -W/-H resized to it (Pillow's
#   Lanczos: cli_resize);
#   refusals, one line each and no picture: a picture under 16 pixels, a size
#   no multiple of 16, --strength out of (0, 1] or without -i,
#   a truncated PNG, a PNG declaring 100000 x 100000, a file that is no PNG,
#   --mask without -i or of another size than the picture, -r or -i twice.
# usage: cli_edit.sh PDIT ST_COMPARE EDIT_GOLDEN FLUX_GOLDEN [MPIRUN...]
set -u
pdit=$1 cmp=$2 g=$3 fg=$4
shift 4
mpirun=("$@")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
meta() { "$cmp" meta "$1" "$2"; }
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

for f in "$g"/img2img-*.safetensors "$g"/inpaint-*.safetensors "$g"/fill-*.safetensors; do
	name=$(basename "$f")
	cfg=$(meta "$f" config)
	gs=$(meta "$f" guidance_scale)
	kind=$(meta "$f" kind)
	"$cmp" topng "$f" in.init_image "$tmp/init.png" || { bad "$name: its picture"; continue; }
	# FLUX.1 Fill: edit-tiny's transformer of Fill's channel layout, dev's VAE and scheduler; its
	# strength is FluxFillPipeline's default (1, the whole schedule)
	if [ "$kind" = fill ]; then
		args=(--transformer "$g/transformer-fill" --vae "$fg/vae-$(meta "$f" vae)" --scheduler "$fg/scheduler-dev")
	else
		args=(--transformer "$fg/transformer-$cfg" --vae "$fg/vae-$cfg" --scheduler "$fg/scheduler-$cfg"
		      --strength "$(meta "$f" strength)")
	fi
	args+=(--embeds "$f" -i "$tmp/init.png" --steps "$(meta "$f" num_inference_steps)" -s "$(meta "$f" noise_seed)")
	# inpainting and Fill: the mask (white repaints) as a gray PNG
	if [ "$kind" = inpaint ] || [ "$kind" = fill ]; then
		"$cmp" topng "$f" in.mask "$tmp/mask.png" || { bad "$name: its mask"; continue; }
		args+=(--mask "$tmp/mask.png")
	fi
	[ "$gs" != null ] && [ "$gs" != 0.0 ] && args+=(--guidance "$gs")
	rm -f "$tmp/img.png"
	if ! "$pdit" generate "${args[@]}" --out-latents "$tmp/lat.safetensors" -o "$tmp/img.png" -q 2> "$tmp/err"; then
		cat "$tmp/err"; bad "pdit generate -i on $name"; continue
	fi
	"$cmp" tensors "$tmp/lat.safetensors" "$f" 1e-4 latents.final > "$tmp/log" || { cat "$tmp/log"; bad "$name: latents"; }
	"$cmp" png "$tmp/img.png" "$f" image.uint8 0 1 > "$tmp/log" || { cat "$tmp/log"; bad "$name: picture"; }
	st=$(meta "$f" strength)
	[ "$kind" = fill ] && st=1
	grep -qa "strength: $st" "$tmp/img.png" || bad "$name: no strength in the PNG's parameters"
	grep -qa "init image hash: [0-9a-f]\{16\}" "$tmp/img.png" || bad "$name: no init image hash in the PNG's parameters"
	ok "$kind $name: latents.final and the picture as diffusers' $(tail -1 "$tmp/log")"
	if [ ${#mpirun[@]} -gt 0 ]; then
		# the conditioning (Fill's) and the known region (inpainting's) travel with the tokens
		meshes=("--ulysses-degree 2" "--ring-degree 2" "--tensor-parallel-degree 2"
		        "--pipefusion-degree 2 --warmup-steps $(meta "$f" num_inference_steps)")
		for mesh in "${meshes[@]}"; do
			# shellcheck disable=SC2086
			if "${mpirun[@]}" -np 2 "$pdit" generate "${args[@]}" $mesh --out-latents "$tmp/lat2.safetensors" \
				-o "$tmp/img2.png" -q 2> "$tmp/err" &&
				"$cmp" tensors "$tmp/lat2.safetensors" "$tmp/lat.safetensors" 1e-5 latents.init latents.final > "$tmp/log"; then
				ok "$(meta "$f" kind) $name on 2 processes ($mesh): one process's latents"
			else
				cat "$tmp/err" "$tmp/log"; bad "$kind $name, $mesh"
			fi
		done
	fi
done

# FLUX.1 Kontext: the reference picture (another size than the output) through -r/--ref-image
for f in "$g"/kontext-*.safetensors; do
	name=$(basename "$f")
	"$cmp" topng "$f" in.ref_image "$tmp/ref.png" || { bad "$name: its reference"; continue; }
	args=(--transformer "$fg/transformer-dev" --vae "$fg/vae-dev" --scheduler "$fg/scheduler-dev" --embeds "$f"
	      -r "$tmp/ref.png" -W "$(meta "$f" width)" -H "$(meta "$f" height)" --guidance "$(meta "$f" guidance_scale)"
	      --steps "$(meta "$f" num_inference_steps)" -s "$(meta "$f" noise_seed)")
	rm -f "$tmp/img.png"
	if "$pdit" generate "${args[@]}" --out-latents "$tmp/lat.safetensors" -o "$tmp/img.png" -q 2> "$tmp/err" &&
		"$cmp" tensors "$tmp/lat.safetensors" "$f" 1e-4 latents.final > "$tmp/log" &&
		"$cmp" png "$tmp/img.png" "$f" image.uint8 0 1 >> "$tmp/log" &&
		grep -qa "reference image hash: [0-9a-f]\{16\}" "$tmp/img.png"; then
		ok "kontext $name (a $(meta "$f" ref_width)x$(meta "$f" ref_height) reference): latents.final and the picture as diffusers' $(tail -1 "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "kontext $name"
	fi
	if [ ${#mpirun[@]} -gt 0 ]; then
		# the sequence is the image's tokens and the reference's: split over the ranks together
		for mesh in "--ulysses-degree 2" "--ring-degree 2" "--tensor-parallel-degree 2" "--pipefusion-degree 2 --warmup-steps 4"; do
			# shellcheck disable=SC2086
			if "${mpirun[@]}" -np 2 "$pdit" generate "${args[@]}" $mesh --out-latents "$tmp/lat2.safetensors" \
				-o "$tmp/img2.png" -q < /dev/null 2> "$tmp/err" &&
				"$cmp" tensors "$tmp/lat2.safetensors" "$tmp/lat.safetensors" 1e-5 latents.final > "$tmp/log"; then
				ok "kontext $name on 2 processes ($mesh): one process's latents"
			else
				cat "$tmp/err" "$tmp/log"; bad "kontext $name, $mesh"
			fi
		done
	fi
done

# refusals: one line naming the problem, nonzero, no picture
f="$g/img2img-dev-h64w48.safetensors"
"$cmp" topng "$f" in.init_image "$tmp/init.png"
base=(--transformer "$fg/transformer-dev" --vae "$fg/vae-dev" --scheduler "$fg/scheduler-dev" --embeds "$f" --steps 2)
expect() {
	local what=$1 want=$2
	shift 2
	rm -f "$tmp/no.png"
	"$pdit" generate "${base[@]}" "$@" -o "$tmp/no.png" > "$tmp/out" 2> "$tmp/err"
	local rc=$?
	if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(grep -c '' "$tmp/err")" -eq 1 ] && grep -qF -- "$want" "$tmp/err" &&
		[ ! -e "$tmp/no.png" ]; then
		ok "$what: $(cat "$tmp/err")"
	else
		echo "exit $rc:"; cat "$tmp/err"; bad "$what"
	fi
}
# a picture of another size than -W/-H (and a mask of the picture's) is resized to the request, as
# diffusers' processors do (cli_resize checks the resize against Pillow's): a 64x64 picture
rm -f "$tmp/big.png"
if "$pdit" generate "${base[@]}" -i "$tmp/init.png" --mask "$tmp/init.png" -W 64 -H 80 -o "$tmp/big.png" -q 2> "$tmp/err" &&
	python3 -c "import struct,sys; d=open(sys.argv[1],'rb').read(24); sys.exit(struct.unpack('>II', d[16:24]) != (64, 80))" \
		"$tmp/big.png"; then
	ok "a 48x64 picture and mask with -W 64 -H 80: resized, a 64x80 picture"
else
	cat "$tmp/err"; bad "a picture of another size than -W/-H"
fi
python3 - "$tmp/small.png" << 'PY'
import struct, sys, zlib
chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
rows = b"".join(b"\0" + b"\x80" * 24 for _ in range(8))
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0)) +
                              chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
PY
expect "a picture under 16 pixels" "smaller than 16x16" -i "$tmp/small.png"
expect "--strength 0" "--strength must be above 0" -i "$tmp/init.png" --strength 0
expect "--strength 1.5" "--strength must be above 0 and at most 1" -i "$tmp/init.png" --strength 1.5
expect "--strength that runs no step" "runs none" -i "$tmp/init.png" --strength 1e-17
expect "--strength without -i" "--strength goes with -i/--init-img" --strength 0.5
expect "--mask without -i" "--mask goes with -i/--init-img" --mask "$tmp/init.png"
expect "two references" "FLUX.1 Kontext takes one reference picture" -r "$tmp/init.png" -r "$tmp/init.png"
expect "two init pictures" "-i/--init-img given twice" -i "$tmp/init.png" -i "$tmp/init.png"
base=(--transformer "$g/transformer-fill" --vae "$fg/vae-dev" --scheduler "$fg/scheduler-dev" --embeds "$f" --steps 2)
expect "FLUX.1 Fill without --mask" "FLUX.1 Fill's transformer" -i "$tmp/init.png"
base=(--transformer "$fg/transformer-dev" --vae "$fg/vae-dev" --scheduler "$fg/scheduler-dev" --embeds "$f" --steps 2)
"$cmp" topng "$g/img2img-schnell-h48w96.safetensors" in.init_image "$tmp/w96.png"
expect "a mask of another size than the picture" "--mask $tmp/w96.png is 96x48, the picture 48x64" -i "$tmp/init.png" \
	--mask "$tmp/w96.png"
head -c 200 "$tmp/init.png" > "$tmp/trunc.png"
expect "a truncated PNG" "$tmp/trunc.png" -i "$tmp/trunc.png"
# a PNG header that says 100000 x 100000 (the IHDR's CRC computed)
python3 - "$tmp/huge.png" << 'PY'
import struct, sys, zlib
ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                              + chunk(b"IEND", b""))
PY
expect "a PNG declaring 100000 x 100000" "at most 16384" -i "$tmp/huge.png"
echo "not a picture" > "$tmp/text.png"
expect "a file that is no PNG" "$tmp/text.png" -i "$tmp/text.png"
"$cmp" topng "$g/img2img-schnell-h48w96.safetensors" in.init_image "$tmp/w96.png"
exit $fail
