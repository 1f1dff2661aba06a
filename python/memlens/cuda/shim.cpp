// Fake CUDA backend for FakeTensorMode tracing on a machine without a GPU.
//
// CPU-only torch build: there is no CUDA device guard and CUDA reports absent,
// so autograd on a fake `cuda` tensor terminates the process and `.cuda()` /
// `copy_` raise. We register (1) a device guard with a per-thread current
// device and stream whose events are no-ops, and (2) CUDA hooks reporting CUDA
// built and available.
// CUDA build, no GPU: the real hooks reject hasPrimaryContext(0), which
// autograd asks before every backward on cuda tensors; ours replace them, and
// simulate.py swaps our guard in while it runs. No CUDA kernels or allocator
// exist here either way: real CUDA tensors still fail.
// Pinned (page-locked) host memory: the hooks hand out a host allocator whose
// blocks they recognise (isPinnedPtr), so `pin_memory()`, `torch.empty(...,
// pin_memory=True)`, DataLoader pinning and DDP's pinned buffers make real host
// tensors that answer is_pinned() True. Nothing is page-locked: no driver here.
// Python calls memlens_fake_cuda_install() right after dlopen(RTLD_GLOBAL) and
// BEFORE `import torch`: at::detail::getCUDAHooks() creates its hooks once.
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>

namespace {
using c10::Device;
using c10::DeviceIndex;
using c10::Stream;
using c10::StreamId;
constexpr auto kCUDA = c10::DeviceType::CUDA;
constexpr DeviceIndex kMaxDevices = 64;

// The autograd engine sizes its per-device queues from deviceCount() once, at
// the first backward, so this must cover every index a simulated rank uses.
std::atomic<int> g_device_count{1};
std::atomic<StreamId> g_next_stream{1};
thread_local DeviceIndex t_device = 0;
thread_local StreamId t_stream[kMaxDevices] = {};
int g_registered = 0;  // bit 0: guard, bit 1: hooks

DeviceIndex slot(DeviceIndex i) { return (i < 0 || i >= kMaxDevices) ? t_device : i; }

struct FakeCUDAGuard final : c10::impl::NoOpDeviceGuardImpl<kCUDA> {
  Device exchangeDevice(Device d) const override {
    Device old = getDevice();
    uncheckedSetDevice(d);
    return old;
  }
  Device getDevice() const override { return Device(kCUDA, t_device); }
  void setDevice(Device d) const override { uncheckedSetDevice(d); }
  void uncheckedSetDevice(Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < kMaxDevices) t_device = d.index();
  }
  // Autograd records each input's stream and compares producer/consumer streams.
  Stream getStream(Device d) const noexcept override {
    auto i = slot(d.index());
    return Stream(Stream::UNSAFE, Device(kCUDA, i), t_stream[i]);
  }
  Stream exchangeStream(Stream s) const noexcept override {
    Stream old = getStream(s.device());
    t_stream[slot(s.device_index())] = s.id();
    return old;
  }
  Stream getDefaultStream(Device d) const override {
    return Stream(Stream::UNSAFE, Device(kCUDA, slot(d.index())), 0);
  }
  Stream getNewStream(Device d, int) const override {
    return Stream(Stream::UNSAFE, Device(kCUDA, slot(d.index())), g_next_stream++);
  }
  Stream getStreamFromGlobalPool(Device d, bool) const override { return getNewStream(d, 0); }
  DeviceIndex deviceCount() const noexcept override { return g_device_count.load(); }
  // The stock no-op guard throws on events; autograd records/blocks them
  // whenever producer and consumer streams differ. No work exists to wait for.
  void record(void**, const Stream&, const DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const DeviceIndex) const override {}
  double elapsedTime(void*, void*, const DeviceIndex) const override { return 0.0; }
};

// Host blocks handed out as pinned: start address -> size (interior pointers of a
// block are pinned too, as cudaPointerGetAttributes reports them).
class PinnedBlocks {
 public:
  void add(void* p, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_[reinterpret_cast<uintptr_t>(p)] = n;
    bytes_ += n;
  }
  void remove(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
    if (it != blocks_.end()) {
      bytes_ -= it->second;
      blocks_.erase(it);
    }
  }
  bool contains(const void* p) {
    auto a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.upper_bound(a);
    if (it == blocks_.begin()) return false;
    --it;
    return a < it->first + (it->second ? it->second : 1);
  }
  long long bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<long long>(bytes_);
  }

 private:
  std::mutex mu_;
  std::map<uintptr_t, size_t> blocks_;
  size_t bytes_ = 0;
};

PinnedBlocks& pinned_blocks() {
  static auto* blocks = new PinnedBlocks();  // leaked: blocks may die at exit, after statics
  return *blocks;
}

void free_pinned(void* p) {
  pinned_blocks().remove(p);
  c10::free_cpu(p);
}

struct FakePinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    // Never null, even for 0 bytes: the block must be found again by isPinnedPtr.
    void* p = c10::alloc_cpu(n ? n : 1);
    pinned_blocks().add(p, n);
    return {p, p, &free_pinned, Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

struct FakeCUDAHooks final : at::CUDAHooksInterface {
  explicit FakeCUDAHooks(at::CUDAHooksArgs) {}
  void init() const override {}  // the engine lazily "initialises" the accelerator
  bool isBuilt() const override { return true; }  // makes CUDA the current accelerator
  bool isAvailable() const override { return true; }
  bool hasCUDA() const override { return true; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
  DeviceIndex deviceCount() const override { return g_device_count.load(); }
  int getNumGPUs() const override { return g_device_count.load(); }
  DeviceIndex current_device() const override { return t_device; }
  DeviceIndex getCurrentDevice() const override { return t_device; }
  void setCurrentDevice(DeviceIndex i) const override { t_device = slot(i); }
  DeviceIndex exchangeDevice(DeviceIndex i) const override {
    DeviceIndex old = t_device;
    t_device = slot(i);
    return old;
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex i) const override { return exchangeDevice(i); }
  void deviceSynchronize(DeviceIndex) const override {}
  // No cuDNN here: 0 makes version-gated cuDNN paths (SDPA, conv layouts) bow out
  // instead of throwing, as the no-GPU CUDA build's own hooks let them.
  long versionCuDNN() const override { return 0; }
  long versionRuntimeCuDNN() const override { return 0; }
  long versionCuDNNFrontend() const override { return 0; }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    static auto* allocator = new FakePinnedAllocator();
    return allocator;
  }
  bool isPinnedPtr(const void* data) const override {
    return data != nullptr && pinned_blocks().contains(data);
  }
};

}  // namespace

extern "C" {
// cuda_build=0: guard into the empty CUDA slot + hooks. cuda_build=1: hooks
// only, at preferred priority so libtorch_cuda's later registration yields
// (the registry prints one "skipping registration" line); libtorch_cuda then
// registers its guard, which simulate swaps for ours (take/restore below).
// Idempotent. Returns what is ours: 1 guard | 2 hooks.
int memlens_fake_cuda_install(int device_count, int cuda_build) {
  if (device_count >= 1 && device_count <= kMaxDevices) g_device_count = device_count;
  if (!cuda_build && !(g_registered & 1) && !c10::impl::hasDeviceGuardImpl(kCUDA)) {
    c10::impl::registerDeviceGuard(kCUDA, new FakeCUDAGuard());  // leaked, like torch's
    g_registered |= 1;
  }
  auto* reg = at::CUDAHooksRegistry();  // equal priority twice would exit(1)
  if (!(g_registered & 2) && (cuda_build || !reg->Has("CUDAHooks"))) {
    reg->Register(
        "CUDAHooks",
        [](at::CUDAHooksArgs a) { return std::unique_ptr<at::CUDAHooksInterface>(new FakeCUDAHooks(a)); },
        cuda_build ? c10::REGISTRY_PREFERRED : c10::REGISTRY_DEFAULT);
    g_registered |= 2;
  }
  return g_registered;
}

// Make our guard the CUDA guard (a CUDA build registers its own at import);
// returns the previous one for memlens_fake_cuda_restore_guard.
const void* memlens_fake_cuda_take_guard() {
  static const FakeCUDAGuard* ours = new FakeCUDAGuard();
  auto& entry = c10::impl::device_guard_impl_registry[static_cast<size_t>(kCUDA)];
  const auto* prev = entry.load();
  if (!(g_registered & 1)) entry.store(ours);
  return prev;
}
void memlens_fake_cuda_restore_guard(const void* prev) {
  if (!(g_registered & 1)) c10::impl::device_guard_impl_registry[static_cast<size_t>(kCUDA)].store(
      static_cast<const c10::impl::DeviceGuardImplInterface*>(prev));
}

// The calling thread's current device and streams, shared with autograd's
// worker threads' view (the engine sets their device through the guard).
int memlens_fake_cuda_device_count() { return g_device_count.load(); }
int memlens_fake_cuda_current_device() { return t_device; }
void memlens_fake_cuda_set_device(int i) { if (i >= 0 && i < kMaxDevices) t_device = i; }
long long memlens_fake_cuda_current_stream(int i) { return t_stream[slot(i)]; }
void memlens_fake_cuda_set_stream(int i, long long id) { t_stream[slot(i)] = id; }
long long memlens_fake_cuda_new_stream() { return g_next_stream++; }
// Bytes of host memory the pinned allocator holds now.
long long memlens_fake_cuda_pinned_bytes() { return pinned_blocks().bytes(); }
}
