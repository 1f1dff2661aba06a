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
