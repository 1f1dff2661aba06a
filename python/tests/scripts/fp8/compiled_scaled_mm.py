"""An FP8 GEMM in a compiled function, as float8 training under torch.compile runs them: both
operands scaled to e4m3 by their absolute maximum, `torch._scaled_mm` to bf16; Inductor calls
the GEMM's `.out` overload into a buffer of its own. (256 x 512) @ (512 x 128), twice."""
import torch

def f(a, b):
    sa = a.abs().amax().float() / 448.0
    sb = b.abs().amax().float() / 448.0
    return torch._scaled_mm((a / sa).to(torch.float8_e4m3fn), (b / sb).to(torch.float8_e4m3fn).t(),
                            scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

g = torch.compile(f)
a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
b = torch.randn(128, 512, device="cuda", dtype=torch.bfloat16)
for _ in range(2):
    print(g(a, b).shape)
