#!/usr/bin/env bash
# Download the data sets that memsafe's data tests, examples and benchmarks read -- MNIST and the
# UCI regression sets -- from their public sources, check every file against
# scripts/data.sha256, and lay them out as the build expects:
#
#   DIR/mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
#   DIR/uci/<name>/{data.csv.gz,test_mask.csv.gz}   DIR/uci/LICENSE
#
# Run `bash scripts/fetch_data.sh --help` for the options. Needs curl (or wget) and sha256sum.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MANIFEST="$ROOT/scripts/data.sha256"
PROG="fetch_data.sh"

# Sources, tried in this order (MEMSAFE_DATA_MIRROR replaces all of them).
# MNIST: the mirror torchvision downloads from, then the one TensorFlow (Datasets) uses; both serve
# the four official IDX .gz files under these names.
MNIST_SOURCES=(
  "https://ossci-datasets.s3.amazonaws.com/mnist"
  "https://storage.googleapis.com/cvdf-datasets/mnist"
)
# UCI: GitHub repository treforevans/uci_datasets (MIT), which keeps each set as
# uci_datasets/<name>/{data,test_mask}.csv.gz (plain Git files since upstream dropped Git LFS in
# 2022; older commits hold LFS pointers at <name>/...) and LICENSE at its root; then jsDelivr's CDN
# copy of the same repository.
UCI_SOURCES=(
  "https://raw.githubusercontent.com/treforevans/uci_datasets/master"
  "https://cdn.jsdelivr.net/gh/treforevans/uci_datasets@master"
)

usage() {
  cat <<EOF
Usage: bash scripts/$PROG [options] [DIR]

Downloads MNIST and the UCI regression sets into DIR (default: \$MEMSAFE_DATA_DIR if set,
else <repo>/data, the folder a build uses when ../shared/data does not exist), checks each file's
SHA-256 against scripts/data.sha256, and moves it into place only when it matches. A file already
in place with the right checksum is not downloaded again. Exits non-zero if any file is missing
or wrong at the end.

Options:
  --only WHAT   fetch only WHAT: mnist, uci, or one UCI set by name (then with uci/LICENSE);
                repeat the option or separate values with commas. UCI sets:
                $(uci_names | paste -sd " " -)
  --check       download nothing: verify the files already in DIR
  -h, --help    this text

Environment:
  MEMSAFE_DATA_DIR     default DIR
  MEMSAFE_DATA_MIRROR  URL replacing every source: files are fetched from
                       <mirror>/mnist/<file>, <mirror>/uci/<name>/<file> and <mirror>/uci/LICENSE
                       (the layout of DIR itself, so any copy of it served over HTTP will do)

Sources: ${MNIST_SOURCES[*]} (MNIST);
         ${UCI_SOURCES[*]} (UCI).
A build reads the data from its MEMSAFE_DATA_DIR (cmake -DMEMSAFE_DATA_DIR=DIR); the tests that
need a missing file are reported as skipped.
EOF
}

die() { echo "$PROG: $*" >&2; exit 2; }

# ---- the manifest: "<sha256>  <path>" lines, plus "#also <sha256>  <path>" for another accepted
# hash of the same path; other "#" lines are comments.
FILES=()     # paths, in manifest order
HASHES=()    # HASHES[i]: the accepted hashes of FILES[i], space-separated
[[ -r $MANIFEST ]] || die "cannot read $MANIFEST"

file_index() {  # prints the index of path $1 in FILES, or returns 1
  local i
  for i in "${!FILES[@]}"; do
    if [[ ${FILES[$i]} == "$1" ]]; then echo "$i"; return 0; fi
  done
  return 1
}

while read -r first second third || [[ -n ${first:-} ]]; do
  case ${first:-} in
    "#also")
      [[ $second =~ ^[0-9a-f]{64}$ && -n ${third:-} ]] || die "bad line in $MANIFEST: #also $second $third"
      i=$(file_index "$third") || die "$MANIFEST: #also for $third, which has no main line before it"
      HASHES[i]="${HASHES[i]} $second"
      ;;
    "" | "#"*) ;;
    *)
      [[ $first =~ ^[0-9a-f]{64}$ && -n ${second:-} && -z ${third:-} ]] || die "bad line in $MANIFEST: $first $second"
      FILES+=("$second")
      HASHES+=("$first")
      ;;
  esac
done <"$MANIFEST"
[[ ${#FILES[@]} -gt 0 ]] || die "no files listed in $MANIFEST"

uci_names() {  # the UCI sets in the manifest, one per line
  local f name last=""
  for f in "${FILES[@]}"; do
    case $f in
      uci/*/*)
        name=${f#uci/}; name=${name%%/*}
        if [[ $name != "$last" ]]; then echo "$name"; last=$name; fi
        ;;
    esac
  done
}

# ---- options
dir=""
only=()
check_only=0
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --check) check_only=1; shift ;;
    --only)
      [[ $# -ge 2 ]] || die "--only needs a value (see --help)"
      IFS=, read -r -a parts <<<"$2"; only+=("${parts[@]}"); shift 2 ;;
    --only=*)
      IFS=, read -r -a parts <<<"${1#--only=}"; only+=("${parts[@]}"); shift ;;
    --) shift; [[ $# -le 1 ]] || die "too many arguments (see --help)"; [[ $# -eq 0 ]] || dir=$1; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [[ -z $dir ]] || die "only one DIR, got '$dir' and '$1' (see --help)"; dir=$1; shift ;;
  esac
done
[[ -n $dir ]] || dir=${MEMSAFE_DATA_DIR:-$ROOT/data}

known_uci=" $(uci_names | tr '\n' ' ') "
for w in ${only[@]+"${only[@]}"}; do
  case $w in
    mnist | uci) ;;
    *) [[ $known_uci == *" $w "* ]] || die "--only $w: not mnist, uci or a UCI set of the manifest:$known_uci" ;;
  esac
done

selected() {  # is manifest path $1 selected by --only?
  local w
  [[ ${#only[@]} -eq 0 ]] && return 0
  for w in "${only[@]}"; do
    case $w in
      mnist) [[ $1 == mnist/* ]] && return 0 ;;
      uci) [[ $1 == uci/* ]] && return 0 ;;
      *) [[ $1 == "uci/$w/"* || $1 == uci/LICENSE ]] && return 0 ;;
    esac
  done
  return 1
}

# ---- tools
if command -v sha256sum >/dev/null 2>&1; then
  sha256_of() { local out; out=$(sha256sum <"$1") || return 1; echo "${out%% *}"; }
elif command -v shasum >/dev/null 2>&1; then
  sha256_of() { local out; out=$(shasum -a 256 <"$1") || return 1; echo "${out%% *}"; }
else
  die "needs sha256sum (GNU coreutils) or shasum"
fi

if [[ $check_only -eq 0 ]]; then
  if command -v curl >/dev/null 2>&1; then
    download() {  # download URL FILE
      curl --fail --silent --show-error --location --retry 3 --retry-delay 2 \
           --connect-timeout 20 --max-time 900 --output "$2" "$1"
    }
  elif command -v wget >/dev/null 2>&1; then
    download() { wget --quiet --tries=3 --waitretry=2 --timeout=60 --output-document="$2" "$1"; }
  else
    die "needs curl or wget (Debian: apt-get install curl; scripts/deps.sh installs it)"
  fi
fi

sources_of() {  # the URLs to try for manifest path $1, one per line
  local rel=$1 s
  if [[ -n ${MEMSAFE_DATA_MIRROR:-} ]]; then
    echo "${MEMSAFE_DATA_MIRROR%/}/$rel"
    return
  fi
  case $rel in
    mnist/*) for s in "${MNIST_SOURCES[@]}"; do echo "$s/${rel#mnist/}"; done ;;
    uci/LICENSE) for s in "${UCI_SOURCES[@]}"; do echo "$s/LICENSE"; done ;;
    uci/*) for s in "${UCI_SOURCES[@]}"; do echo "$s/uci_datasets/${rel#uci/}"; done ;;
    *) die "no source known for $rel (scripts/data.sha256)" ;;
  esac
}

accepts() {  # accepts "<hashes>" HASH: is HASH one of the space-separated hashes?
  [[ " $1 " == *" $2 "* ]]
}
either() { echo "${1// / or }"; }  # "h1 h2" -> "h1 or h2"

# ---- the temporary file being downloaded, removed on any exit
tmp=""
cleanup() { if [[ -n $tmp ]]; then rm -f -- "$tmp"; fi; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

file_mode=$(printf '%o' $((0666 & ~$(umask))))

if [[ $check_only -eq 0 ]]; then
  mkdir -p -- "$dir"
fi
if [[ -d $dir ]]; then dir=$(cd -- "$dir" && pwd); fi

n_ok=0 n_new=0 failed=()
for i in "${!FILES[@]}"; do
  rel=${FILES[$i]}
  selected "$rel" || continue
  want=${HASHES[$i]}
  dest="$dir/$rel"

  if [[ -f $dest ]]; then
    have=$(sha256_of "$dest") || die "cannot read $dest"
    if accepts "$want" "$have"; then
      echo "$rel: ok (already present)"
      n_ok=$((n_ok + 1))
      continue
    fi
    echo "$PROG: $dest: sha256 $have, expected $(either "$want")" >&2
    if [[ $check_only -eq 1 ]]; then failed+=("$rel (checksum mismatch)"); continue; fi
    echo "$rel: wrong checksum: downloading it again" >&2
  elif [[ $check_only -eq 1 ]]; then
    echo "$PROG: $dest: missing" >&2
    failed+=("$rel (missing)")
    continue
  fi

  destdir=$(dirname -- "$dest")
  mkdir -p -- "$destdir"
  done_one=0
  while read -r url; do
    tmp=$(mktemp "$destdir/.$(basename -- "$dest").XXXXXX.part")
    if ! download "$url" "$tmp" </dev/null; then
      echo "$PROG: $rel: download failed from $url" >&2
      rm -f -- "$tmp"; tmp=""
      continue
    fi
    got=$(sha256_of "$tmp") || die "cannot read $tmp"
    if ! accepts "$want" "$got"; then
      echo "$PROG: checksum mismatch for $rel from $url: expected sha256 $(either "$want"), got $got (file discarded)" >&2
      rm -f -- "$tmp"; tmp=""
      continue
    fi
    chmod "$file_mode" "$tmp"
    mv -f -- "$tmp" "$dest"
    tmp=""
    echo "$rel: downloaded from $url"
    n_new=$((n_new + 1))
    done_one=1
    break
  done < <(sources_of "$rel")
  if [[ $done_one -eq 0 ]]; then failed+=("$rel"); fi
done

n_all=$((n_ok + n_new + ${#failed[@]}))
[[ $n_all -gt 0 ]] || die "nothing selected (--only ${only[*]})"
if [[ $check_only -eq 1 ]]; then
  echo "$PROG: $dir: $n_ok of $n_all files present with the right checksum"
else
  echo "$PROG: $dir: $n_new downloaded, $n_ok already present, ${#failed[@]} failed"
fi
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "$PROG: FAILED (${#failed[@]} of $n_all):" >&2
  printf '  %s\n' "${failed[@]}" >&2
  exit 1
fi
if [[ $check_only -eq 0 ]]; then
  shared=$(cd -- "$ROOT/.." && pwd)/shared/data
  if [[ $dir != "$ROOT/data" && $dir != "$shared" && $dir != "${MEMSAFE_DATA_DIR:-}" ]]; then
    echo "$PROG: a build reads these with: cmake -DMEMSAFE_DATA_DIR=$dir ... (or MEMSAFE_DATA_DIR=$dir for the examples)"
  fi
fi
