#!/usr/bin/env bash
# Install everything the test suite needs from the project's own files, then run it.
# Safe to run again: each step is a no-op when its result is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# nginx is the real HTTP server the remote tests start on 127.0.0.1.
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
    else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
    fi
fi

# The CPU wheel of torch first, pinned: a looser spec pulls the CUDA build.
python -m pip install -q torch==2.13.0
# llama-cpp-python compiles llama.cpp; a native build uses AMX, which these
# kernels refuse (SIGILL), so build for the generic CPU.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
# The frameworks extra (jax, tensorflow-cpu, paddlepaddle, mlx[cpu]) is for
# tests/test_compat_frameworks.py: about 610 MB of wheels, 287 s to install
# on a 2-core machine; it leaves numpy, torch and protobuf as they are.
python -m pip install -q -e ".[test,frameworks]"

# llama.cpp's own converter, vocab files and C sources ship in the
# llama-cpp-python sdist; the conversion tests use them as the oracle.
# Fetch the exact version that is installed, once, into a cache folder.
export WEIGHTSMITH_LLAMA_SDIST="${WEIGHTSMITH_LLAMA_SDIST:-$HOME/.cache/weightsmith/llama-sdist}"
llama_version=$(python -c "import importlib.metadata as m; print(m.version('llama-cpp-python'))")
if [ ! -d "$WEIGHTSMITH_LLAMA_SDIST/llama_cpp_python-$llama_version" ]; then
    mkdir -p "$WEIGHTSMITH_LLAMA_SDIST"
    python -m pip download -q --no-deps --no-binary :all: -d "$WEIGHTSMITH_LLAMA_SDIST" "llama-cpp-python==$llama_version"
    tar -xzf "$WEIGHTSMITH_LLAMA_SDIST/llama_cpp_python-$llama_version.tar.gz" -C "$WEIGHTSMITH_LLAMA_SDIST"
fi

# transformers' own Meta -> HF converter (convert_llama_weights_to_hf.py), the oracle of
# the original-checkpoint tests: transformers 5 dropped it, and it calls tokenizer APIs
# that 5 changed, so 4.47.1 (the last release with it) goes into a folder of its own.
export WEIGHTSMITH_TRANSFORMERS_ORACLE="${WEIGHTSMITH_TRANSFORMERS_ORACLE:-$HOME/.cache/weightsmith/transformers-oracle}"
oracle_dir="$WEIGHTSMITH_TRANSFORMERS_ORACLE/4.47.1"
if [ ! -f "$oracle_dir/convert_llama_weights_to_hf.py" ]; then
    python -m pip install -q --no-deps --target "$oracle_dir/site" \
        "transformers==4.47.1" "tokenizers>=0.21,<0.22" "huggingface_hub>=0.24,<1.0" "accelerate>=0.26,<1.2" psutil
    cp "$oracle_dir/site/transformers/models/llama/convert_llama_weights_to_hf.py" "$oracle_dir/"
fi

# timm (and torchvision, which timm imports), the only builder of Gemma 3n's MobileNetV5
# vision tower in transformers 5: into a folder of their own, without dependencies
# (pip would otherwise swap the pinned CPU torch for a CUDA build).  torchvision 0.28.0
# is the release built against torch 2.13.0; PyPI's wheel is a CUDA build whose C ops do
# not load beside the CPU torch, which the Gemma 3n builder does not need
# (tests/support/gemma3n_timm_oracle.py).  Only that builder's subprocess imports them.
export WEIGHTSMITH_TIMM_ORACLE="${WEIGHTSMITH_TIMM_ORACLE:-$HOME/.cache/weightsmith/timm-oracle}"
timm_dir="$WEIGHTSMITH_TIMM_ORACLE/1.0.31"
if [ ! -d "$timm_dir/site/timm" ]; then
    python -m pip install -q --no-deps --target "$timm_dir/site" "timm==1.0.31" "torchvision==0.28.0"
fi

# The safetensors header validator and the GGUF string-array scan are C that reads
# hostile bytes: build a second copy with AddressSanitizer + UBSan (any report
# aborts) and run the malformed-file cases, the fuzz seed corpora and short fuzz
# runs on it (a deliberate over-read of one byte past a header, or past a GGUF
# string prefix, is reported: checked by hand).  RLIMIT_AS cannot be
# combined with ASan's shadow memory, so the corpora are replayed in process.
if [ "${WEIGHTSMITH_SANITIZE:-1}" = 1 ]; then
    san=$(mktemp -d)
    trap 'rm -rf "$san"' EXIT
    cp -r src/weightsmith "$san/weightsmith"
    rm -f "$san"/weightsmith/_native/*.so
    CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g" \
        LDFLAGS="-fsanitize=address,undefined" \
        python setup.py -q build_ext --build-lib "$san" --build-temp "$san/build" >/dev/null
    # PYTHONMALLOC=malloc: buffers from Python's own allocator are invisible to ASan
    LD_PRELOAD="$(gcc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0 PYTHONMALLOC=malloc \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 PYTHONPATH="$san" \
        python -m pytest -q -p no:cacheprovider tests/test_safetensors_validation.py \
        "tests/test_safetensors_header.py" -k "not hf_written and not whitespace" \
        "tests/test_reliability_fuzz.py::test_seeds_raise_only_named_errors" \
        "tests/test_reliability_fuzz.py::test_fuzz_smoke[safetensors]" \
        tests/test_gguf_hardening.py "tests/test_gguf_oracle.py::test_string_arrays" \
        "tests/test_gguf_oracle.py::test_string_array_zero_filled_and_indexing" \
        "tests/test_gguf_oracle.py::test_prefix_parsing_long_string_array" \
        "tests/test_reliability_fuzz.py::test_fuzz_smoke[gguf]"
fi

# pytest exits 5 when it collects nothing: that is a failure here, not a pass.
set +e
python -m pytest -q --durations=60 "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
    echo "pytest collected no tests" >&2
fi
exit "$rc"
