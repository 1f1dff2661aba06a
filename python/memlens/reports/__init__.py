"""What a snapshot becomes for people: the terminal report, the standalone HTML panel, and
PyTorch's memory_viz pickle."""
