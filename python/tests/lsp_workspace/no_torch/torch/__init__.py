# Stands in for an environment without PyTorch (the launch configuration "Without torch").
raise ModuleNotFoundError("No module named 'torch'", name="torch")
