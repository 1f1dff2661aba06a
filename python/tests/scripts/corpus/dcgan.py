"""pytorch/examples dcgan-style: a generator and a discriminator, two Adam optimizers, BCELoss,
real/fake label tensors made with `torch.full`, `D(fake.detach())`.

Patterns: `weights_init` applied with `model.apply` reading `classname.find('Conv')`, two
`optimizer.step()` calls per iteration on different models, `output.mean().item()` for D(x) and
D(G(z)), `'%.4f'` formatting of five values in one print, `torch.save(netG.state_dict(), ...)`,
`random.seed` + `torch.manual_seed` from a `manualSeed`.
"""
import os
import random
import tempfile

import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

NZ, NGF, NDF, NC = 64, 32, 32, 3


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(NZ, NGF * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(NGF * 8), nn.ReLU(True),
            nn.ConvTranspose2d(NGF * 8, NGF * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF * 4), nn.ReLU(True),
            nn.ConvTranspose2d(NGF * 4, NGF * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF * 2), nn.ReLU(True),
            nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF), nn.ReLU(True),
            nn.ConvTranspose2d(NGF, NC, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(NC, NDF, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF * 2, NDF * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 4), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF * 4, NDF * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 8), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF * 8, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, x):
        return self.main(x).view(-1, 1).squeeze(1)


def build_models():
    return Generator(), Discriminator()


def main():
    manual_seed = 999
    random.seed(manual_seed)
    torch.manual_seed(manual_seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    images = torch.rand(32, NC, 64, 64) * 2 - 1
    dataloader = DataLoader(TensorDataset(images), batch_size=8, shuffle=True, num_workers=2)
    netG, netD = build_models()
    netG, netD = netG.to(device), netD.to(device)
    netG.apply(weights_init)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(8, NZ, 1, 1, device=device)
    real_label, fake_label = 1.0, 0.0
    optimizerD = optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    out_dir = tempfile.mkdtemp(prefix="dcgan_")
    for epoch in range(2):
        for i, (real_cpu,) in enumerate(dataloader):
            # (1) update D: maximize log(D(x)) + log(1 - D(G(z)))
            netD.zero_grad()
            real_cpu = real_cpu.to(device)
            b_size = real_cpu.size(0)
            label = torch.full((b_size,), real_label, dtype=torch.float, device=device)
            output = netD(real_cpu)
            errD_real = criterion(output, label)
            errD_real.backward()
            D_x = output.mean().item()
            noise = torch.randn(b_size, NZ, 1, 1, device=device)
            fake = netG(noise)
            label.fill_(fake_label)
            output = netD(fake.detach())
            errD_fake = criterion(output, label)
            errD_fake.backward()
            D_G_z1 = output.mean().item()
            errD = errD_real + errD_fake
            optimizerD.step()
            # (2) update G: maximize log(D(G(z)))
            netG.zero_grad()
            label.fill_(real_label)
            output = netD(fake)
            errG = criterion(output, label)
            errG.backward()
            D_G_z2 = output.mean().item()
            optimizerG.step()
            print("[%d/%d][%d/%d] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f / %.4f"
                  % (epoch, 2, i, len(dataloader), errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))
        with torch.no_grad():
            fake = netG(fixed_noise).detach().cpu()
        torch.save(fake, os.path.join(out_dir, f"fake_samples_epoch_{epoch:03d}.pt"))
        torch.save(netG.state_dict(), os.path.join(out_dir, f"netG_epoch_{epoch}.pth"))
        torch.save(netD.state_dict(), os.path.join(out_dir, f"netD_epoch_{epoch}.pth"))


if __name__ == "__main__":
    main()
