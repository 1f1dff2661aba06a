"""The categories every traced byte belongs to (exactly one at any moment)."""

PARAMETER = 0
BUFFER = 1
GRADIENT = 2
OPTIMIZER_STATE = 3
ACTIVATION = 4
TEMPORARY = 5
INPUT = 6
OTHER = 7

NAMES = ("parameter", "buffer", "gradient", "optimizer_state", "activation", "temporary", "input",
         "other")

LABELS = ("parameters", "buffers", "gradients", "optimizer state", "activations", "temporaries",
          "inputs", "other")

# Categories that describe model state; the rest describe the step's working memory.
MODEL_STATE = (PARAMETER, BUFFER, GRADIENT, OPTIMIZER_STATE)

# Subcategories: a finer name for some bytes of one category, shown under it (the category's
# total still counts them). Index 0 is "none". FP8 training (torchao's Float8Linear, Transformer
# Engine) keeps FP8 casts of the weights and their fp32 scales (per tensor or per row): they are
# parameters in another form, but a user sizing FP8 wants to see them apart.
SUB_NONE = 0
SUB_FP8 = 1
SUB_NAMES = ("", "fp8")
SUB_LABELS = ("", "fp8 weights/scales")
SUB_PARENT = (None, PARAMETER)
