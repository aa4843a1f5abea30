#!/usr/bin/env bash
# Lays out the golden text encoders in the build tree as the reference made
# them: DST links every file of SRC, and each text encoder's model.safetensors
# is rebuilt from the model.rows.safetensors kept in the repository.
# usage: golden_te_unpack.sh SRC DST TE_UNPACK
set -euo pipefail
src=$1 dst=$2 tool=$3
rm -rf "$dst"
mkdir -p "$dst"
for f in "$src"/*; do
	name=$(basename "$f")
	case $name in
	text_encoder | text_encoder_2)
		mkdir "$dst/$name"
		ln -s "$f/config.json" "$dst/$name/config.json"
		"$tool" "$f/model.rows.safetensors" "$dst/$name/model.safetensors"
		;;
	*) ln -s "$f" "$dst/$name" ;;
	esac
done
