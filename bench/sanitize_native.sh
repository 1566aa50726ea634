#!/usr/bin/env bash
# Build the native record decoder and encoder, dump-segment's native text formatter and compact's native
# write path (_cleaner_c) and the columnar Avro reader (_avro_c) with AddressSanitizer +
# UBSan and run the twin tests, the fuzz tests, the dump-segment tests and a bench/fuzz_long.py run
# against them: any out-of-bounds read, overflow or undefined
# behaviour aborts with a report (exit status non-zero).
#
#     bench/sanitize_native.sh [fuzz_long inputs, default 20000]
#
# Works on a copy of the source tree in a temp dir, so the installed kstore and any process using
# the ordinary build are left alone.
set -euo pipefail
SRC="$(cd "$(dirname "$0")/.." && pwd)"
N="${1:-20000}"
WORK="$(mktemp -d -t kstore-asan-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
tar -C "$SRC" --exclude=.git --exclude='*.so' --exclude=build --exclude=.hypothesis -cf - . | tar -C "$WORK" -xf -
cd "$WORK"
KSTORE_REQUIRE_NATIVE=1 \
KSTORE_EXTRA_CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
KSTORE_EXTRA_LDFLAGS="-fsanitize=address,undefined" \
    python3 setup.py -q build_ext --inplace --force 2>&1 | grep -E "warning:|error" || true
ls kstore_cli/record/_decode_c*.so kstore_cli/record/_encode_c*.so kstore_cli/record/_cleaner_c*.so kstore_cli/record/_dumptext_c*.so >/dev/null
# The sanitizer runtimes must come first; Python's allocator is not instrumented (PYTHONMALLOC=malloc
# sends it to ASan's malloc) and CPython leaks at exit by design: leaks are not the point here.
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export KSTORE_DECODER=native PYTHONMALLOC=malloc PYTHONPATH="$WORK"
python3 -c "from kstore_cli.record import decode, _decode_c; assert decode.BACKEND == 'native'; print('sanitized', _decode_c.__file__)"
python3 -c "from kstore_cli.dump import text_log; from kstore_cli.record import _dumptext_c; assert text_log._native_format_v2 is not None; print('sanitized', _dumptext_c.__file__)"
python3 -c "from kstore_cli.record import encode, _encode_c; assert encode.BACKEND == 'native'; print('sanitized', _encode_c.__file__)"
status=0
python3 -m pytest -q -p no:cacheprovider tests/record/test_decode_twins.py tests/record/test_columns.py tests/record/test_fuzz.py \
    tests/record/test_properties.py tests/dump/test_dumplog_damaged.py \
    tests/dump/test_dumptext_native.py tests/dump/test_dumplog.py tests/commands/test_dump_segment_golden.py \
    tests/record/test_encode_twins.py tests/operations/test_convert.py tests/operations/test_convert_fast_path.py || status=$?
python3 bench/fuzz_long.py "$N" --no-memory --seed 7 || status=$?
# compact's native write path (kstore_cli/record/_cleaner_c.c): its twin tests and the cleaner's.
python3 -c "from kstore_cli.record import record_filter, _cleaner_c; assert record_filter.BACKEND == 'native'; print('sanitized', _cleaner_c.__file__)" || status=$?
python3 -m pytest -q -p no:cacheprovider tests/cleaner/test_cleaner_twins.py tests/cleaner/test_cleaner.py \
    tests/commands/test_compact.py || status=$?
# the columnar Avro decoder's native reader (_avro_c), damaged payloads included
KSTORE_DECODER=native python3 -m pytest -q -p no:cacheprovider tests/spark/test_avro_columns.py || status=$?
echo "sanitize_native: exit $status"
exit $status
