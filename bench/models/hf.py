"""hf.py - the Hugging Face side of the whole-model benchmark: the models
(their own random init), their weights as one safetensors file named as the
graph's parameters (bench/models/irgen.py), and the rotary tables.

Presets:
  gpt2  124m   GPT2LMHeadModel with GPT2Config()'s defaults (12 layers, 768, 12 heads,
               vocabulary 50257, 1024 positions, gelu_new)
        tiny   2 layers, 64 wide, 4 heads, vocabulary 1000, 128 positions (CPU checks)
  llama 1b     LlamaForCausalLM shaped as a 1B-class model (Llama 3.2 1B's shape): hidden
               2048, 16 layers, 32 query and 8 key/value heads of 64, MLP 8192,
               vocabulary 128256, RoPE theta 500000, RMSNorm eps 1e-5, tied embeddings
        tiny   2 layers, hidden 64, 4 query and 2 key/value heads of 16, MLP 128,
               vocabulary 1000
"""
import torch

import irgen

PRESETS = {
    ("gpt2", "124m"): {},
    ("gpt2", "tiny"): dict(n_embd=64, n_layer=2, n_head=4, vocab_size=1000, n_positions=128),
    ("llama", "1b"): dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                          intermediate_size=8192, vocab_size=128256, max_position_embeddings=8192,
                          rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True),
    ("llama", "tiny"): dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            intermediate_size=128, vocab_size=1000, max_position_embeddings=256,
                            rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True),
}


def build(kind, preset, seed=0, device="cpu"):
    """The model in f32, eval mode, its own random init under `seed`."""
    import transformers

    kw = dict(PRESETS[(kind, preset)])
    torch.manual_seed(seed)
    def make():
        if kind == "gpt2":
            return transformers.GPT2LMHeadModel(transformers.GPT2Config(use_cache=False, **kw))
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(use_cache=False, **kw))

    # Built on the device: initializing 1.2B parameters on the host takes tens
    # of seconds. A transformers that cannot build under a device context builds
    # on the host.
    try:
        with torch.device(device):
            model = make()
    except Exception:
        torch.manual_seed(seed)
        model = make()
    return model.to(device=device, dtype=torch.float32).eval()


def to_bf16(model):
    """A bf16 copy of the model, as from_pretrained(dtype=torch.bfloat16) makes
    it: the rotary inv_freq buffers stay f32 (.to(bfloat16) alone would round
    them, and the angles of far positions with them)."""
    import copy

    keep = {n: b.detach().clone() for n, b in model.named_buffers() if n.endswith("inv_freq")}
    m = copy.deepcopy(model).to(torch.bfloat16)
    for n, b in keep.items():
        mod = m.get_submodule(n.rsplit(".", 1)[0])
        mod.register_buffer("inv_freq", b, persistent=False)
    return m


def graph(kind, model, dtype, gqa="broadcast"):
    """(text, params) of the model's .ir graph in `dtype` (f32 or bf16)."""
    cfg = model.config.to_dict()
    if kind == "gpt2":
        return irgen.gpt2_ir(cfg, dtype)
    return irgen.llama_ir(cfg, dtype, gqa)


N_INPUTS = {"gpt2": 1, "llama": 3}  # input_ids (and cos, sin) come from --inputs


def weights(model, params, n_inputs, dtype):
    """The state_dict tensors that the graph's weight parameters name, cast
    to `dtype` and made contiguous, checked against the graph's shapes."""
    sd = model.state_dict()
    tdt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    out = {}
    for name, _, shape in params[n_inputs:]:
        t = sd[name]
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{name}: state_dict shape {tuple(t.shape)}, graph {tuple(shape)}")
        out[name] = t.detach().to(tdt).contiguous().cpu()
    return out


def save(tensors, path):
    import safetensors.torch

    safetensors.torch.save_file(tensors, str(path))


def rope_tables(model, T):
    """Hugging Face's cos and sin for positions 0..T-1, [T, head_dim], f32
    (fusec rounds them to bf16 for a bf16 graph, as the model's .to(dtype)
    does)."""
    emb = model.model.rotary_emb
    dev = next(model.parameters()).device
    x = torch.zeros(1, T, 1, device=dev, dtype=torch.float32)
    cos, sin = emb(x, torch.arange(T, device=dev)[None])
    return cos[0].float().cpu().numpy(), sin[0].float().cpu().numpy()


@torch.no_grad()
def logits(model, ids):
    return model(input_ids=ids, use_cache=False).logits
