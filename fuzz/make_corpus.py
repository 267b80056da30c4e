#!/usr/bin/python3
"""fuzz/make_corpus.py - writes the hand-made seed inputs of fuzz/corpus/.

Each target gets a few small valid inputs and near-valid ones (one field
wrong, cut short, an edge value), so that the fuzzer starts next to the
interesting branches. Run from anywhere; it rewrites only the seeds it
names (seed-*), never files libFuzzer added.
Usage: /usr/bin/python3 fuzz/make_corpus.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ---- safetensors ----------------------------------------------------------
def st(header, data=b"", pad=True, hlen=None):
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - (len(h) + 8) % 8) % 8)
    return struct.pack("<Q", len(h) if hlen is None else hlen) + h + data


def safetensors():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.25)
    put("fuzz_safetensors", "one-f32", st(
        {"__metadata__": {"format": "pt"},
         "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, f32))
    put("fuzz_safetensors", "mixed", st(
        {"a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
         "b": {"dtype": "I8", "shape": [1, 1, 1, 2], "data_offsets": [6, 8]},
         "c": {"dtype": "I64", "shape": [], "data_offsets": [8, 16]},
         "e": {"dtype": "U8", "shape": [0], "data_offsets": [16, 16]}}, bytes(range(16))))
    put("fuzz_safetensors", "empty", st({}))
    put("fuzz_safetensors", "overlap", st(
        {"a": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]},
         "b": {"dtype": "F16", "shape": [2], "data_offsets": [4, 8]}}, bytes(8)))
    put("fuzz_safetensors", "past-end", st(
        {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)))
    put("fuzz_safetensors", "shape-mismatch", st(
        {"a": {"dtype": "I32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8)))
    put("fuzz_safetensors", "huge-dims", st(
        {"a": {"dtype": "F32", "shape": [1099511627776, 1099511627776], "data_offsets": [0, 0]}}))
    put("fuzz_safetensors", "bad-hlen", st({"a": 1}, hlen=1 << 40))
    put("fuzz_safetensors", "meta-not-string", st({"__metadata__": {"k": 1}}))
    put("fuzz_safetensors", "odd-name", st(
        {"q\"\\\u00e9\n": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, b"x"))


# ---- data sets ------------------------------------------------------------
def datasets():
    chat = {"messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "Is this good? \u00e9"},
                         {"role": "assistant", "content": "positive"}]}
    pc = {"prompt": "Review: great film\nSentiment:", "completion": " positive"}
    j = lambda o: json.dumps(o, ensure_ascii=False)
    put("fuzz_dataset", "chat", "\n".join([j(chat)] * 3) + "\n")
    put("fuzz_dataset", "prompt-completion", j(pc) + "\r\n\r\n" + j(pc))
    put("fuzz_dataset", "mixed", j(chat) + "\n" + j(pc) + "\n")
    put("fuzz_dataset", "missing-completion", j(pc) + "\n" + j({"prompt": "x"}) + "\n")
    put("fuzz_dataset", "bad-role", j({"messages": [{"role": "b\u00f6t\u00f6" * 12,
                                                     "content": "x"}]}))
    put("fuzz_dataset", "no-assistant", j({"messages": [{"role": "user", "content": "hi"}]}))
    put("fuzz_dataset", "not-json", "{\"prompt\": \"a\", \"completion\": \"b\"\n{oops")
    put("fuzz_dataset", "both-forms", j({"messages": [], "prompt": "a", "completion": "b"}))
    put("fuzz_dataset", "empty-completion", j({"prompt": "a", "completion": ""}))
    put("fuzz_dataset", "blank", "\n \t\r\n\n")
    put("fuzz_dataset", "bad-utf8", b"{\"prompt\": \"\xc3\", \"completion\": \"x\"}\n")


# ---- multipart ------------------------------------------------------------
def multipart():
    ct = "multipart/form-data; boundary=XyZ123"
    body = ("--XyZ123\r\n"
            "Content-Disposition: form-data; name=\"purpose\"\r\n\r\n"
            "fine-tune\r\n"
            "--XyZ123\r\n"
            "Content-Disposition: form-data; name=\"file\"; filename=\"train.jsonl\"\r\n"
            "Content-Type: application/jsonl\r\n\r\n"
            "{\"prompt\":\"a\",\"completion\":\"b\"}\n\r\n"
            "--XyZ123--\r\n")
    put("fuzz_multipart", "upload", ct + "\n" + body)
    put("fuzz_multipart", "quoted-boundary",
        "multipart/form-data; charset=utf-8; boundary=\"a;b\\\"c\"\n"
        "preamble\r\n--a;b\"c\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--a;b\"c--")
    put("fuzz_multipart", "no-close", ct + "\n" + body[:-12])
    put("fuzz_multipart", "no-name", ct + "\n--XyZ123\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ123--")
    put("fuzz_multipart", "no-headers", "multipart/form-data; boundary=B\n--B\r\n\r\nx\r\n--B--")
    put("fuzz_multipart", "many-parts", "multipart/form-data; boundary=B\n" +
        "".join("--B\r\nContent-Disposition: form-data; name=\"p%d\"\r\n\r\n%d\r\n" % (i, i)
                for i in range(10)) + "--B--")
    put("fuzz_multipart", "not-multipart", "application/json\n{}")


# ---- tokenizers -----------------------------------------------------------
def byte_char(b):
    printable = lambda i: 33 <= i <= 126 or 161 <= i <= 172 or 174 <= i <= 255
    if printable(b):
        return chr(b)
    return chr(256 + sum(1 for i in range(b) if not printable(i)))


def tokenizers():
    merges = ["\u0120 t", "h e", "\u0120t he", "l l", "e ll"]
    vocab = {byte_char(b): b for b in range(256)}
    for i, m in enumerate(merges):
        vocab[m.replace(" ", "")] = 256 + i
    gpt2 = {"added_tokens": [{"id": 261, "content": "<|endoftext|>", "special": True}],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
            "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": vocab, "merges": merges, "unk_token": None}}
    text = "\0the hello <|endoftext|> 123 \u00e9\n"
    put("fuzz_tokenizer", "gpt2", json.dumps(gpt2, ensure_ascii=False) + text)
    l3 = json.loads(json.dumps(gpt2))
    l3["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}| ?\\p{L}+|\\s+(?!\\S)|\\s+|."},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}
    l3["model"]["ignore_merges"] = True
    l3["model"]["merges"] = [m.split(" ") for m in merges]  # the newer list-of-pairs form
    put("fuzz_tokenizer", "llama3", json.dumps(l3, ensure_ascii=False) + text)
    sp_vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        sp_vocab["<0x%02X>" % b] = 3 + b
    for i, p in enumerate(["\u2581", "h", "e", "l", "\u2581h", "\u2581he", "ll"]):
        sp_vocab[p] = 259 + i
    sp = {"added_tokens": [{"id": i, "content": c, "special": True}
                           for i, c in enumerate(["<unk>", "<s>", "</s>"])],
          "normalizer": {"type": "Sequence", "normalizers": [
              {"type": "Prepend", "prepend": "\u2581"},
              {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
          "pre_tokenizer": None,
          "decoder": {"type": "Sequence", "decoders": [
              {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
              {"type": "ByteFallback"}, {"type": "Fuse"},
              {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
          "model": {"type": "BPE", "vocab": sp_vocab,
                    "merges": ["\u2581 h", "\u2581h e", "l l"], "unk_token": "<unk>",
                    "byte_fallback": True, "fuse_unk": True}}
    put("fuzz_tokenizer", "sentencepiece", json.dumps(sp, ensure_ascii=False) + "\0<s>hell w\u00f6rld")
    ms = json.loads(json.dumps(sp))
    ms["normalizer"] = None
    ms["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                           "prepend_scheme": "first", "split": False}
    ms["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"},
        {"type": "ByteFallback"}]}
    put("fuzz_tokenizer", "metaspace", json.dumps(ms, ensure_ascii=False) + "\0 hello\n")
    put("fuzz_tokenizer", "bad-merge", '{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a c"]}}')
    put("fuzz_tokenizer", "bad-regex", '{"model":{"type":"BPE","vocab":{"a":0}},'
        '"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(a"}}}')
    put("fuzz_tokenizer", "sparse-ids", '{"model":{"type":"BPE","vocab":{"a":0,"b":9,"ab":4},'
        '"merges":["a b"]},"added_tokens":[{"id":7,"content":"<x>","special":false}]}\0abab<x>')
    put("fuzz_tokenizer", "text-plain", "Hello, world! It's 2024.\n\n  \u00dcn\u00efc\u00f6d\u00e9 \u2014 ok\t")
    put("fuzz_tokenizer", "text-special", "the<|endoftext|> the <s>hello</s> \U0001F600 12345678")
    put("fuzz_tokenizer", "text-bytes", bytes([0x80, 0xff, 0xc3, 0x28, 0xed, 0xa0, 0x80, 0x41]))


safetensors()
datasets()
multipart()
tokenizers()


# ---- the API --------------------------------------------------------------
def req(method, target, body="", auth=None, ctype="application/json"):
    head = "%s %s\n" % (method, target)
    if auth:
        head += "Authorization: Bearer %s\n" % auth
    if ctype:
        head += "Content-Type: %s\n" % ctype
    return head + "\n" + body


def router():
    r = lambda name, *a, **k: put("fuzz_router_json", name, req(*a, **k))
    job = {"model": "$MODEL", "training_file": "$FILE", "validation_file": "$FILE",
           "name": "sentiment", "precision": "4-bit", "goal": "fastest_finish",
           "adapter": "lora", "suffix": "my-model_1", "seed": 42, "max_steps": 30,
           "metadata": {"team": "nlp"},
           "method": {"type": "supervised", "supervised": {"hyperparameters": {
               "n_epochs": 2, "batch_size": "auto", "learning_rate_multiplier": 0.5}}}}
    r("job-create-full", "POST", "/v1/fine_tuning/jobs", json.dumps(job))
    r("job-create-min", "POST", "/v1/fine_tuning/jobs",
      '{"model":"$MODEL","training_file":"$FILE","hyperparameters":{"n_epochs":3}}')
    r("job-create-bad", "POST", "/v1/fine_tuning/jobs",
      '{"model":"$MODEL","training_file":"$OFILE","precision":"8-bit","seed":-1,'
      '"hyperparameters":{"batch_size":1e300},"metadata":[1]}')
    r("job-create-full16", "POST", "/v1/fine_tuning/jobs",
      '{"model":"$MODEL","training_file":"$FILE","adapter":"full","precision":"16-bit"}')
    r("job-create-samples", "POST", "/v1/fine_tuning/jobs",
      '{"model":"$MODEL","training_file":"$FILE","sample_prompts":["Review: fine\\nSentiment:",'
      '[{"role":"system","content":"Be brief."},{"role":"user","content":"Good?"}]]}')
    r("estimate", "POST", "/v1/fine_tuning/estimates",
      '{"model":"$MODEL","training_file":"$FILE","goal":"lowest_cost"}')
    r("estimate-not-json", "POST", "/v1/fine_tuning/estimates", '{"model":"$MODEL",')
    r("jobs-list", "GET", "/v1/fine_tuning/jobs?limit=2&after=$JOB", ctype=None)
    r("job-get", "GET", "/v1/fine_tuning/jobs/$JOB", ctype=None)
    r("job-get-other", "GET", "/v1/fine_tuning/jobs/$OJOB", ctype=None)
    r("job-cancel", "POST", "/v1/fine_tuning/jobs/$JOB/cancel", ctype=None)
    r("job-events", "GET", "/v1/fine_tuning/jobs/$JOB/events?limit=5", ctype=None)
    r("job-checkpoints", "GET", "/v1/fine_tuning/jobs/$JOB/checkpoints", ctype=None)
    r("job-log-follow", "GET", "/v1/fine_tuning/jobs/$JOB/log?follow=1", ctype=None)
    r("files-list", "GET", "/v1/files?limit=1", auth="$OTHER", ctype=None)
    r("file-get", "GET", "/v1/files/$FILE", ctype=None)
    r("file-content", "GET", "/v1/files/$FILE/content", ctype=None)
    r("file-delete-other", "DELETE", "/v1/files/$FILE", auth="$OTHER", ctype=None)
    upload = ("--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nfine-tune\r\n"
              "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"d\u00e9j\u00e0.jsonl\"\r\n"
              "Content-Type: application/jsonl\r\n\r\n"
              "{\"prompt\":\"a\",\"completion\":\"b\"}\n\r\n--B--\r\n")
    r("file-upload", "POST", "/v1/files", upload, ctype="multipart/form-data; boundary=B")
    r("file-upload-bad-line", "POST", "/v1/files", upload.replace('"completion"', '"c"'),
      ctype="multipart/form-data; boundary=B")
    r("models", "GET", "/v1/models", ctype=None)
    r("model-get", "GET", "/v1/models/$MODEL", ctype=None)
    r("model-export", "GET", "/v1/models/$MODEL/export?format=gguf", ctype=None)
    r("completion", "POST", "/v1/completions",
      '{"model":"$MODEL","prompt":["Hello"],"max_tokens":4,"temperature":0,"seed":1}')
    r("workers", "GET", "/v1/workers", ctype=None)
    r("drain", "POST", "/v1/workers/w1/drain", ctype=None)
    r("drain-not-operator", "POST", "/v1/workers/w1/drain", auth="$OTHER", ctype=None)
    r("ledger", "GET", "/v1/billing/ledger?limit=3", ctype=None)
    r("health", "GET", "/healthz", auth="nothing", ctype=None)
    r("metrics", "GET", "/metrics", ctype=None)
    r("static", "GET", "/index.html", ctype=None)
    r("static-traversal", "GET", "/%2e%2e/%2e%2e/etc/passwd", ctype=None)
    r("no-route", "PATCH", "/v1/fine_tuning/jobs/$JOB", "{}")
    r("bad-key", "GET", "/v1/fine_tuning/jobs", auth="sk-alallo-wrong", ctype=None)
    t = "$TOKEN"
    r("w-register", "POST", "/internal/workers/register",
      '{"name":"w2","cpus":4,"mem_bytes":17179869184,"accelerator":"cpu",'
      '"price_per_hour":1.5,"class":"spot","speed":{"tokens_per_s":null,"flops":null}}', auth=t)
    r("w-heartbeat", "POST", "/internal/workers/w1/heartbeat",
      '{"attempt_id":"$ATTEMPT","fence":1}', auth=t)
    r("w-claim", "POST", "/internal/workers/w1/claim", "{}", auth=t)
    r("w-events", "POST", "/internal/attempts/$ATTEMPT/events",
      '{"fence":1,"first":0,"events":[{"type":"started","max_steps":30},'
      '{"type":"step","step":1,"loss":2.5,"tokens":512},'
      '{"type":"log","line":"step 1 loss 2.5"},'
      '{"type":"checkpoint","step":1,"path":"ckpt-1","bytes":100}]}', auth=t)
    r("w-finish", "POST", "/internal/attempts/$ATTEMPT/finish",
      '{"fence":1,"exit_status":1,"signal":null,"error_kind":"data",'
      '"line":"line 3 of train.jsonl: missing field \\"completion\\"","stop":null}', auth=t)
    r("w-finish-signal", "POST", "/internal/attempts/$ATTEMPT/finish",
      '{"fence":1,"exit_status":null,"signal":9,"error_kind":null,"line":null,"stop":"move"}',
      auth=t)
    r("w-wrong-token", "POST", "/internal/workers/w1/claim", "{}", auth="$KEY")


router()


# ---- job_request ----------------------------------------------------------
def job_request():
    def put_body(name, body):
        put("fuzz_job_request", name, json.dumps(body))
    put_body("plain", {"model": "tiny", "training_file": "file-abc"})
    put_body("full", {"model": "tiny", "training_file": "file-abc", "validation_file": "file-v",
                      "hyperparameters": {"n_epochs": 2, "batch_size": "auto",
                                          "learning_rate_multiplier": 0.5, "max_seq_len": 128,
                                          "packing": True, "lora_rank": 8, "lora_alpha": 16,
                                          "lora_dropout": 0.1, "lora_target_modules": ["q_proj"],
                                          "warmup_ratio": 0.1, "weight_decay": 0.01,
                                          "lr_scheduler": "cosine", "validation_split": 0.1,
                                          "early_stopping": {"patience": 2, "min_delta": 0.01}},
                      "suffix": "s-1", "name": "n", "precision": "4-bit", "goal": "fastest_finish",
                      "adapter": "lora", "seed": 7, "metadata": {"k": "v"},
                      "integrations": [{"type": "wandb", "wandb": {"project": "p"}}],
                      "sample_prompts": ["hello"], "max_steps": 10})
    put_body("dpo", {"model": "tiny", "training_file": "file-p",
                     "method": {"type": "dpo", "dpo": {"hyperparameters": {"beta": 0.1}}}})
    put_body("bad-hyper", {"model": "tiny", "training_file": "f", "hyperparameters": {"n_epochs": 0}})
    put_body("bad-many", {"model": 5, "training_file": "f", "seed": -1, "max_steps": 0})


job_request()


# ---- GGUF -----------------------------------------------------------------
def gguf_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_file(kvs, tensors, version=3, align=32):
    """kvs: [(key, type, payload bytes)]; tensors: [(name, dims, type, data)]."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, t, payload in kvs:
        head += gguf_str(key) + struct.pack("<I", t) + payload
    off, datas = 0, b""
    for name, dims, t, data in tensors:
        head += gguf_str(name) + struct.pack("<I", len(dims)) + b"".join(
            struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", t, off)
        datas += data + b"\0" * ((-len(data)) % align)
        off += len(data) + (-len(data)) % align
    head += b"\0" * ((-len(head)) % align)
    return head + datas


def gguf():
    kv_arch = ("general.architecture", 8, gguf_str("llama"))
    kv_ctx = ("llama.context_length", 4, struct.pack("<I", 256))
    kv_eps = ("llama.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-5))
    kv_tok = ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + gguf_str("a") +
              gguf_str("b") + gguf_str("\u00e9"))
    kv_scores = ("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 3) + struct.pack("<3f", 0, -1, 1e30))
    kv_bool = ("general.tied", 7, b"\x01")
    kv_u64 = ("general.size", 10, struct.pack("<Q", 1 << 40))
    kv_f64 = ("general.f64", 12, struct.pack("<d", -2.5))
    w = struct.pack("<6f", *range(6))
    put("fuzz_gguf", "file-small", gguf_file(
        [kv_arch, kv_ctx, kv_eps, kv_tok, kv_scores, kv_bool, kv_u64, kv_f64],
        [("token_embd.weight", [3, 2], 0, w), ("output_norm.weight", [3], 1, bytes(6)),
         ("blk.0.attn_q.weight", [1, 1, 1, 2], 30, bytes(4))]))
    put("fuzz_gguf", "file-v2-empty", gguf_file([], [], version=2))
    put("fuzz_gguf", "file-align64", gguf_file(
        [("general.alignment", 4, struct.pack("<I", 64))], [("t", [4], 0, bytes(16))], align=64))
    put("fuzz_gguf", "file-truncated", gguf_file([kv_arch], [("t", [8], 0, bytes(32))])[:-8])
    put("fuzz_gguf", "file-bad-type", gguf_file([], [("q", [32], 2, bytes(18))]))
    put("fuzz_gguf", "file-huge-counts", b"GGUF" + struct.pack("<IQQ", 3, 1 << 62, 1 << 62))
    # Recipes: opcode bytes then operands (see fuzz_gguf.c, step()).
    put("fuzz_gguf", "recipe-kvs", bytes([0, 0x80 | 3, 0x61, 0x62, 0x63, 7, 0, 0, 0,
                                          4, 1, 0x85, 0x6c, 0x6c, 0x61, 0x6d, 0x61,
                                          6, 3, 2, 0x81, 0x61, 0x82, 0xc3, 0xa9,
                                          8, 4, 2, 0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x7f]))
    put("fuzz_gguf", "recipe-tensors", bytes([9, 0x85, 0x77, 0x2e, 0x6f, 0x75, 0x74, 0, 2, 3, 2,
                                              1, 2, 3, 4,
                                              9, 0x81, 0x6e, 1, 1, 5, 9, 9, 9, 9,
                                              9, 0x82, 0x62, 0x66, 2, 4, 1, 2, 3, 4, 0, 0, 0, 0]))


gguf()
