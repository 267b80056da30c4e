# bench/service/common.sh - shared by run.sh and stores.sh (sourced).

# Builds the load generator into WORK/loadgen and a stand-in model folder
# WORK/models/tiny (jobs are created, never trained).
bench_prepare() {
  local work=$1 here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  cc -O2 -o "$work/loadgen" "$here/loadgen.c" -lcurl -lpthread
  mkdir -p "$work/models/tiny"
  cat > "$work/models/tiny/config.json" <<'JSON'
{"hidden_size":64,"intermediate_size":172,"num_hidden_layers":2,"num_attention_heads":4,
 "num_key_value_heads":2,"vocab_size":400,"max_position_embeddings":512,"tie_word_embeddings":true}
JSON
  echo '{}' > "$work/models/tiny/tokenizer.json"
  echo 'stand-in weights' > "$work/models/tiny/model.safetensors"
}

# A free TCP port on 127.0.0.1.
bench_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
