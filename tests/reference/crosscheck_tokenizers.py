#!/usr/bin/env python3
"""Both tokenizers against reference implementations, on fresh random prompts.

CLIP: tests/golden/text-encoders-tiny/numpy_reference_te.py re-implements transformers' slow CLIP
tokenizer (without ftfy) from its formulas and reproduces every recorded id. T5: sentencepiece itself
(Debian's python3-sentencepiece 0.1.97, the version the golden ids came from); without it, the same
file's re-implementation, whose double-precision path scores can break exact ties differently from
sentencepiece's float ones (a warning is printed). Both run on N prompts drawn at random (seed printed; a new one each run unless given)
from pools that stress the rules: ASCII words and punctuation, contractions in both cases, digits,
accented letters precomposed and combining, Greek with final sigma, Turkish dotted I, CJK, kana,
hangul, emoji with ZWJ and skin tones, full-width forms, ligatures, curly quotes, every kind of space,
zero-width and control characters, tabs and newlines. Every id must be equal.

Not drawn: special-token strings typed into a prompt. transformers maps CLIP's "<|endoftext|>" to its
id (so does pdit) and splits T5's "</s>" out before sentencepiece (pdit does not); the reference
implements neither, and its README leaves them out.

    crosscheck_tokenizers.py TOK_DUMP GOLDEN_TE_DIR [N] [SEED]
"""
import json
import os
import random
import subprocess
import sys
import time

DUMP, TE = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 1500
SEED = int(sys.argv[4]) if len(sys.argv) > 4 else int(time.time())
sys.argv = [sys.argv[0], TE]
sys.path.insert(0, TE)
import numpy_reference_te as te  # noqa: E402

POOLS = [
    ["a", "photo", "of", "the", "cat", "Lion", "SUNSET", "digital", "art", "hello", "World", "x", "qu", "zz"],
    ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "n't", "'", "''"],
    ["0", "7", "42", "3.14", "1,000", "2024", "½", "²", "٣", "Ⅻ"],
    [",", ".", "!", "?", ":", ";", "-", "--", "—", "(", ")", "[", "]", "{", "}", "#", "$", "%", "&", "@", "/",
     "\\", "*", "+", "=", "<", ">", "|", "~", "^", "_", "`", "\"", "&amp;"],
    ["café", "naïve", "Über", "jalapeño", "e\u0301", "a\u0308", "n\u0303o", "Å", "Ø", "ß", "Œuvre", "ﬁ", "ﬂ"],
    ["ΣΟΦΙΑ", "σοφία", "ΟΔΟΣ", "Σ", "ΑΣ.", "ΑΣ'Β", "İstanbul", "I\u0307", "ǅ", "ǈ", "Ꭰ"],
    ["東京", "猫", "一只可爱的小猫", "タワー", "の", "ｶﾀｶﾅ", "서울", "밤", "𠀀", "〇"],
    ["🐱", "🎩", "👍🏽", "👨\u200d👩\u200d👧", "🇯🇵", "❤️", "✨"],
    ["ＦＵＬＬ", "ｗｉｄｔｈ", "１２３", "！", "“", "”", "‘", "’", "…", "«", "»", "•", "·"],
    [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2002", "\u3000", "\u200b", "\u200d", "\ufeff", "\u2028",
     "\x01", "\x7f", "\u0085", "\u00ad", "\ue000"],
]


def prompt(rng):
    parts = []
    for _ in range(rng.randint(0, 14)):
        pool = rng.choice(POOLS)
        parts.append(rng.choice(pool))
        if rng.random() < 0.6:
            parts.append(" ")
    return "".join(parts)


def main():
    rng = random.Random(SEED)
    prompts = [prompt(rng) for _ in range(N)]
    clip = te.ClipTok(os.path.join(TE, "tokenizer"))
    try:
        import sentencepiece
        sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(TE, "tokenizer_2", "spiece.model"))
        t5_encode = sp.encode
    except ImportError:
        print("warning: no sentencepiece module; T5 against the Python re-implementation")
        t5_encode = te.T5Tok(os.path.join(TE, "tokenizer_2", "spiece.model")).encode
    data = "".join(json.dumps(p) + "\n" for p in prompts)
    r = subprocess.run([DUMP, os.path.join(TE, "tokenizer"), os.path.join(TE, "tokenizer_2")], input=data,
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr)
        return 1
    lines = r.stdout.split("\n")
    bad = 0
    for i, p in enumerate(prompts):
        got_c = [int(x) for x in lines[2 * i].split()[1:]]
        got_t = [int(x) for x in lines[2 * i + 1].split()[1:]]
        want_c, want_t = clip.encode(p), t5_encode(p)
        for name, got, want in (("CLIP", got_c, want_c), ("T5", got_t, want_t)):
            if got != want:
                bad += 1
                if bad <= 10:
                    print("FAIL %s %r\n  pdit   %s\n  python %s" % (name, p, got, want))
    print("seed %d: %d random prompts, %d tokenizations differ" % (SEED, N, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
