#!/usr/bin/env bash
# Writes a tiny data set in the Fashion-MNIST layout into DIR (the examples' --data path, tested
# without the 60,000 real images): train-{images-idx3,labels-idx1}-ubyte with 256 images and
# t10k-* with 64, 8x8 pixels, label i % 10 for image i, its pixels 20·label + (pixel index % 7):
# learnable, so a few epochs lower the loss.
#   tiny_idx.sh DIR
set -euo pipefail
dir=$1
mkdir -p "$dir"
# idx PREFIX N KIND: the IDX file of N images (KIND images) or labels (KIND labels), bytes by awk.
idx() {
  LC_ALL=C awk -v n="$2" -v kind="$3" 'function be32(v) { printf "%c%c%c%c", int(v / 16777216) % 256, int(v / 65536) % 256, int(v / 256) % 256, v % 256 }
    BEGIN { printf "%c%c%c%c", 0, 0, 8, kind == "images" ? 3 : 1; be32(n)
            if (kind == "images") { be32(8); be32(8) }
            for (i = 0; i < n; ++i)
              if (kind == "labels") printf "%c", i % 10
              else for (j = 0; j < 64; ++j) printf "%c", 20 * (i % 10) + j % 7 }' >"$dir/$1-$3-idx$([[ $3 == images ]] && echo 3 || echo 1)-ubyte"
}
idx train 256 images
idx train 256 labels
idx t10k 64 images
idx t10k 64 labels
