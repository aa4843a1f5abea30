#!/usr/bin/env python3
"""Packs the golden text encoders for the repository (run once; the output is committed).

    tests/lib/te_pack.py ../shared/golden/text-encoders-tiny tests/golden/text-encoders-tiny

The tiny encoders keep the real vocabularies, so their token tables (49408 x 32 and 32128 x 32 f32)
make files of 6.4 and 4.2 MB. The golden cases only look up the ids their prompts produce, so the
repository keeps, for each table NAME, the rows those ids select (NAME.rows [K] int64, NAME.values
[K, D]) and the table's row count (metadata "NAME.full_rows"), and every other tensor as it is, in
model.rows.safetensors. tests/lib/te_unpack.c rebuilds model.safetensors at build time: the kept rows bit for
bit, every other row zero. Any prompt still encodes; only the golden prompts' results are the reference's.
"""
import glob
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testfiles import load_st, save_st  # noqa: E402

SRC, DST = sys.argv[1], sys.argv[2]
TABLES = {"text_encoder": ("text_model.embeddings.token_embedding.weight", "clip.input_ids"),
          "text_encoder_2": ("shared.weight", "t5.input_ids")}

for comp, (table, prefix) in TABLES.items():
    ids = set()
    for case in glob.glob(os.path.join(SRC, "cases", "*.safetensors")) + glob.glob(os.path.join(SRC, "*.safetensors")):
        for k, v in load_st(case).items():
            if k.startswith(prefix):
                ids.update(int(x) for x in np.ravel(v))
    t = load_st(os.path.join(SRC, comp, "model.safetensors"))
    full = t.pop(table)
    rows = np.array(sorted(ids), np.int64)
    t[table + ".rows"] = rows
    t[table + ".values"] = full[rows]
    out = os.path.join(DST, comp, "model.rows.safetensors")
    save_st(out, t, {"format": "pt", table + ".full_rows": str(full.shape[0])})
    print("%s: %d of %d rows of %s kept, %d bytes" % (comp, len(rows), full.shape[0], table, os.path.getsize(out)))
