"""Qwen2-VL, built from a small config, trained one step on a batch as its processor makes one:
token ids with an image's placeholder tokens, the image's patches and its grid (t, h, w), the
token types; its vision tower and its multimodal rotary positions compute shapes and loop
counts from those values."""
import torch
from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

VOCAB, IMAGE, START, END = 1000, 999, 997, 996


def small_config() -> Qwen2VLConfig:
    return Qwen2VLConfig(
        text_config=dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [4, 6, 6]}),
        vision_config=dict(depth=2, embed_dim=64, hidden_size=128, num_heads=4, mlp_ratio=2,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=IMAGE, vision_start_token_id=START, vision_end_token_id=END,
        video_token_id=998, vocab_size=VOCAB, bos_token_id=None, eos_token_id=None)

if __name__ == "__main__":
    model = Qwen2VLForConditionalGeneration(small_config()).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    grid = torch.tensor([[1, 8, 8], [1, 8, 8]])  # 64 patches of 14 px, merged 2 x 2: 16 tokens
    ids = torch.randint(0, 900, (2, 64))
    ids[:, 1], ids[:, 2:18], ids[:, 18] = START, IMAGE, END
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids,
             "pixel_values": torch.randn(2 * 64, 3 * 2 * 14 * 14), "image_grid_thw": grid,
             "mm_token_type_ids": (ids == IMAGE).int()}
    for step in range(2):
        loss = model(**{k: v.cuda() for k, v in batch.items()}).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
