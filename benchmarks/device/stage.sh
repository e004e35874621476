#!/usr/bin/env bash
# Stage, on this machine, what a lent GPU machine (the workplace's `device` tool) lacks for benchmarks/device/session.sh:
# wheels its image does not have (it has torch 2.11 and transformers 5.17, no datasets/evaluate; nothing can be
# downloaded there) and the Multi30k corpus (../shared does not travel). Everything goes into device_carry/
# (git-ignored), which each device call names in `carry`; the working tree that travels must stay under 64 MiB.
#
#   bash benchmarks/device/stage.sh [MULTI30K_DIR]            (default ../shared/data/multi30k)
#   bash benchmarks/device/stage.sh --ctranslate2              CTranslate2 alone, into device_carry_ct2/ (git-ignored)
#
# CTranslate2's wheel (43 MB) does not fit beside pyarrow's (55 MB) in one call's 64 MiB: --ctranslate2 packs it as
# an xz archive (25 MB) for a later call of the same lease (session.sh carry-ctranslate2), or for the first call of a
# lease whose image has a pyarrow that datasets accepts.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = --ctranslate2 ]; then
    rm -rf device_carry_ct2 && mkdir -p device_carry_ct2/unpacked
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        -d device_carry_ct2 ctranslate2==4.8.5
    python3 -m zipfile -e device_carry_ct2/ctranslate2-*.whl device_carry_ct2/unpacked
    tar -C device_carry_ct2/unpacked -cf - . | xz -9 -T2 > device_carry_ct2/ctranslate2.tar.xz
    rm -rf device_carry_ct2/unpacked device_carry_ct2/*.whl
    du -sh device_carry_ct2
    exit 0
fi
data_dir=${1:-../shared/data/multi30k}
[ -d "$data_dir" ] || { echo "stage.sh: no corpus folder $data_dir" >&2; exit 1; }

rm -rf device_carry
mkdir -p device_carry/whl device_carry/multi30k
cp "$data_dir"/*.gz device_carry/multi30k/
# Python 3.12, x86-64 (the device image). datasets 5.2 needs pyarrow >= 24 and fsspec <= 2026.9: carried so an older
# or newer copy in the image cannot break it. CTranslate2 (43 MB) does not fit beside pyarrow; the GPU benchmark
# runs without its ctranslate2 section.
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d device_carry/whl \
    datasets==5.2.0 evaluate==0.4.6 dill==0.4.1 multiprocess==0.70.19 pyarrow==26.0.1 fsspec==2026.9.0
du -sh device_carry
echo "staged; each device call: carry [\"device_carry\"], command: bash benchmarks/device/session.sh ..."
