#!/usr/bin/env bash
# Footprint of examples/elect.rs as a static, stripped release binary, plus
# the run-time figures from examples/bench.rs. Prints a table for the README.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(rustc -vV | sed -n 's/^host: //p')

RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --quiet --release --example elect --target "$target"
bin="target/$target/release/examples/elect"
strip "$bin" 2>/dev/null || true
size=$(stat -c %s "$bin")
linkage=$(file -b "$bin" | grep -o 'static[^,]*' | head -n1 || true)
# Distinct crates, this one included: cargo tree repeats a crate it has
# shown already with " (*)", which is not another crate.
crates=$(cargo tree -e normal --prefix none | sed 's/ (\*)$//' | sort -u | wc -l)

echo "| figure | value | goal |"
echo "|---|---|---|"
printf '| elect binary (release, +crt-static, stripped) | %s bytes (%.2f MB), %s | < 3 MB |\n' \
  "$size" "$(awk -v s="$size" 'BEGIN{print s/1000000}')" "${linkage:-see file(1)}"
echo "| distinct crates in the default dependency tree, this one included | $crates | <= 37 |"
echo
cargo run --quiet --release --example bench -- --elect "$bin"
