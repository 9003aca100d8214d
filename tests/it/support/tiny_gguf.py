"""Writes a small random-weight llama GGUF for the prompt-cache test tier (no download).

The vocabulary is what llama.cpp's SentencePiece-style tokenizer needs at least: <unk>, <s>,
</s> and the 256 byte-fallback tokens <0x00>..<0xFF>, so any text tokenizes to bytes. The
layers are wide enough that evaluating a ~150-token prompt costs measurably more than one
token, which is what makes a reused KV cache visible in the time to first token.

usage: tiny_gguf.py OUT.gguf
"""
import sys

import numpy as np
import gguf

N_EMBD, N_LAYER, N_HEAD, N_FF, N_CTX = 384, 6, 6, 1024, 1024


def main(path: str) -> None:
    rng = np.random.default_rng(7)
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{b:02X}>".encode() for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(path, "llama")
    w.add_name("vigil-tiny-random")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_chat_template(
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )

    def t(name: str, *shape: int) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    def ones(name: str) -> None:
        w.add_tensor(name, np.ones(N_EMBD, dtype=np.float32))

    # numpy shapes are (rows=out, cols=in); the writer stores them in ggml's reversed order.
    # Only printable ASCII gets a random output row; every other token (control, end of text,
    # bytes that would start a UTF-8 sequence) has logit 0 and loses to the best of ~95 random
    # logits, so greedy decoding always emits visible text and never stops early.
    out = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
    out[3 + 0x20 : 3 + 0x7F] = rng.standard_normal((0x7F - 0x20, N_EMBD)) * 0.02
    w.add_tensor("token_embd.weight", (rng.standard_normal((n_vocab, N_EMBD)) * 0.02).astype(np.float32))
    ones("output_norm.weight")
    w.add_tensor("output.weight", out)
    for i in range(N_LAYER):
        ones(f"blk.{i}.attn_norm.weight")
        t(f"blk.{i}.attn_q.weight", N_EMBD, N_EMBD)
        t(f"blk.{i}.attn_k.weight", N_EMBD, N_EMBD)
        t(f"blk.{i}.attn_v.weight", N_EMBD, N_EMBD)
        t(f"blk.{i}.attn_output.weight", N_EMBD, N_EMBD)
        ones(f"blk.{i}.ffn_norm.weight")
        t(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(sys.argv[1])
