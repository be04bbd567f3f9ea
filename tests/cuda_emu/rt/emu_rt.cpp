// The CPU emulator behind tests/cuda_emu/fake: CUDA threads as fibers, the
// runtime API with one deferred work queue, and the bookkeeping that lets
// tests check the backend's contracts (allocations, host waits, pointer
// kinds, launch limits). See fake/cuda_runtime.h and fake/cuda_runtime_api.h.
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <set>
#include <vector>

#include <execinfo.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "cuda_runtime.h"

// Streams, events and graphs belong to the context current when they were
// made (emu::Ctx, below).
namespace emu { struct Ctx; }
struct CUstream_st {
  emu::Ctx *ctx = nullptr;
  unsigned flags = 0;
  bool capturing = false;
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
};
struct CUevent_st {
  emu::Ctx *ctx = nullptr;
  bool complete = true;
  bool captured = false;  // last recorded in a capturing stream
};
struct CUgraph_st { int dummy; };

#if defined(__SANITIZE_ADDRESS__)
#define TODRE_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TODRE_EMU_ASAN 1
#endif
#endif
#ifdef TODRE_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace emu {
ThreadState *g_thread;
dim3 g_block_dim, g_grid_dim;

namespace {

// ---- configuration (environment), counters, errors ------------------------

long env_long(const char *name, long dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end;
  long v = strtol(s, &end, 10);
  return *end ? dflt : v;
}
int sm_count() { return (int)env_long("TODRE_EMU_SMS", 4); }
int smem_optin() { return (int)env_long("TODRE_EMU_SMEM_OPTIN", 232448); }  // H100: 227 KiB
constexpr int kDefaultSmem = 48 * 1024;

todre_emu_counters g_count;
cudaError_t g_last = cudaSuccess;   // cudaGetLastError()
cudaError_t g_async = cudaSuccess;  // failure inside queued work, reported at the next wait
int g_order = 0;

cudaError_t set_last(cudaError_t e) {
  if (e != cudaSuccess) g_last = e;
  return e;
}

int device_count() { return (int)env_long("TODRE_EMU_DEVICES", 1); }
// A driver older than the runtime (CUDART_VERSION) cannot run it.
int driver_version() { return (int)env_long("TODRE_EMU_DRIVER_VERSION", CUDART_VERSION); }
bool driver_ok() { return driver_version() >= CUDART_VERSION; }

}  // namespace

// ---- contexts (CUDA 12+ runtime over the driver's context stack) ---------

struct Ctx {
  int device;
  bool primary;
};

namespace {

struct Primary {
  Ctx ctx;
  bool active = false;  // initialised (by cudaSetDevice, a lazy bind or a retain)
  int retains = 0;      // cuDevicePrimaryCtxRetain minus cuDevicePrimaryCtxRelease
};
// Static storage: contexts outlive everything, and exit-time leak checks.
constexpr int kMaxDevices = 64, kMaxUserContexts = 64;
Primary g_primary[kMaxDevices];
Ctx g_user_ctx[kMaxUserContexts];
int g_user_ctx_count = 0;
thread_local Ctx *t_cur = nullptr;      // the thread's current context
thread_local int t_dev = 0;             // the thread's runtime device

// Callers check device < device_count(); the emulator has at most 64.
Primary &primary(int device) {
  if (device < 0 || device >= kMaxDevices) {
    fprintf(stderr, "todre CUDA emulator: device %d: at most %d devices\n", device, kMaxDevices);
    abort();
  }
  Primary &p = g_primary[device];
  p.ctx = {device, true};
  return p;
}
void activate(Primary &p) {
  if (!p.active) {
    p.active = true;
    g_count.primary_inits++;
  }
}

}  // namespace

// The context a runtime call runs in: the current one, or (a thread without
// one) the primary context of the thread's device, bound to the thread.
Ctx *bind_ctx() {
  if (!t_cur) {
    Primary &p = primary(t_dev);
    activate(p);
    t_cur = &p.ctx;
  }
  return t_cur;
}
void *bind_ctx_opaque() { return bind_ctx(); }

namespace {

// ---- memory --------------------------------------------------------------

enum class Mem { device, pinned };
struct Alloc { size_t bytes; Mem kind; int device; };
std::map<uintptr_t, Alloc> g_allocs;

const std::pair<const uintptr_t, Alloc> *find_alloc(const void *p) {
  uintptr_t a = (uintptr_t)p;
  auto it = g_allocs.upper_bound(a);
  if (it == g_allocs.begin()) return nullptr;
  --it;
  if (a < it->first + (it->second.bytes ? it->second.bytes : 1)) return &*it;
  return nullptr;
}
// 0: plain host memory, 1: pinned host, 2: device; -1: partly outside its allocation.
int classify(const void *p, size_t bytes) {
  auto *a = find_alloc(p);
  if (!a) return 0;
  if ((uintptr_t)p + bytes > a->first + a->second.bytes) return -1;
  return a->second.kind == Mem::device ? 2 : 1;
}

// ---- the work queue ------------------------------------------------------

std::set<cudaStream_t> g_streams;
std::deque<std::function<void()>> g_queue;
bool g_flushing = false;

bool stream_ok(cudaStream_t s) { return s == nullptr || g_streams.count(s) != 0; }

// TODRE_EMU_CAPTURING=1: every stream reports capture (and records work).
bool env_capturing() { return env_long("TODRE_EMU_CAPTURING", 0) != 0; }
// A blocking stream capturing in global or thread-local mode makes the
// legacy stream unusable (cudaErrorStreamCaptureImplicit).
bool legacy_blocked() {
  for (cudaStream_t s : g_streams)
    if (s->capturing && !(s->flags & cudaStreamNonBlocking) && s->mode != cudaStreamCaptureModeRelaxed)
      return true;
  return false;
}
bool capturing(cudaStream_t s) { return env_capturing() || (s && s->capturing); }

void flush() {
  if (g_flushing) return;
  g_flushing = true;
  while (!g_queue.empty()) {
    std::function<void()> op = std::move(g_queue.front());
    g_queue.pop_front();
    op();
  }
  g_flushing = false;
}
// Counted only when work was queued: waiting on an idle device is free.
cudaError_t host_wait() {
  if (!g_queue.empty()) {
    g_count.host_waits++;
    if (env_long("TODRE_EMU_TRACE_WAITS", 0)) {  // who made the host wait
      void *bt[16];
      fprintf(stderr, "todre CUDA emulator: host wait with %zu queued operations\n", g_queue.size());
      backtrace_symbols_fd(bt, backtrace(bt, 16), 2);
    }
  }
  flush();
  cudaError_t e = g_async;
  g_async = cudaSuccess;
  return set_last(e);
}

// ---- fibers --------------------------------------------------------------

struct Bar {
  int expected = 0, arrived = 0;
  std::vector<struct Fiber *> waiters;
};
struct Block {
  Bar bar;
  std::vector<Bar> warp_bar;
  std::vector<uint64_t> warp_buf;  // [warp][parity][32]
  int acc = 0;
  void *smem = nullptr;
};
struct Fiber {
  ThreadState ts;
  Block *blk;
#if defined(__x86_64__)
  void *sp;
#else
  ucontext_t ctx;
#endif
  char *stack;
  Bar *waiting = nullptr;
  bool done = false;
  unsigned xchg = 0;  // warp exchanges done (buffer parity)
  void *fake_stack = nullptr;
};

constexpr size_t kStack = 256 * 1024;
std::vector<char *> g_stack_pool;
char *stack_get() {
  if (!g_stack_pool.empty()) {
    char *s = g_stack_pool.back();
    g_stack_pool.pop_back();
    return s;
  }
  // A guard page below the stack turns an overflow into a fault.
  char *m = (char *)mmap(nullptr, kStack + 4096, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) { perror("emu: mmap"); abort(); }
  mprotect(m, 4096, PROT_NONE);
  return m + 4096;
}

// ---- context switch: 6 callee-saved registers on x86-64 (SysV), ucontext
// elsewhere (slower: each ucontext switch saves and restores the signal
// mask with a system call).
#if defined(__x86_64__)
extern "C" void todre_emu_switch(void **save_sp, void *to_sp);
asm(R"(
  .text
  .globl todre_emu_switch
  .hidden todre_emu_switch
  .type todre_emu_switch,@function
todre_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size todre_emu_switch, .-todre_emu_switch
)");
void *g_sched_sp;
#else
ucontext_t g_sched;
#endif
Fiber *g_fiber;
Bar *g_grid_bar;
const std::function<void()> *g_body;
// The scheduler's stack, for ASan's fiber annotations (unused otherwise).
[[maybe_unused]] void *g_sched_bottom;
[[maybe_unused]] size_t g_sched_size;

void switch_to_scheduler(Fiber *f) {
#if defined(__x86_64__)
  todre_emu_switch(&f->sp, g_sched_sp);
#else
  swapcontext(&f->ctx, &g_sched);
#endif
}

void yield_to_scheduler() {
  Fiber *f = g_fiber;
#ifdef TODRE_EMU_ASAN
  __sanitizer_start_switch_fiber(&f->fake_stack, g_sched_bottom, g_sched_size);
#endif
  switch_to_scheduler(f);
#ifdef TODRE_EMU_ASAN
  __sanitizer_finish_switch_fiber(f->fake_stack, (const void **)&g_sched_bottom, &g_sched_size);
#endif
}

void trampoline() {
#ifdef TODRE_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, (const void **)&g_sched_bottom, &g_sched_size);
#endif
  (*g_body)();
  Fiber *f = g_fiber;
  f->done = true;
#ifdef TODRE_EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, g_sched_bottom, g_sched_size);
#endif
#if defined(__x86_64__)
  todre_emu_switch(&f->sp, g_sched_sp);  // never resumed
  abort();
#endif
  // ucontext: returning resumes uc_link (the scheduler)
}

void fiber_init(Fiber &f) {
#if defined(__x86_64__)
  // The frame todre_emu_switch pops: six registers, then trampoline as the
  // return address, above it a null "return address" of trampoline itself,
  // so that trampoline starts with the stack aligned as after a call.
  void **top = (void **)(f.stack + kStack);
  *--top = nullptr;
  *--top = (void *)trampoline;
  for (int i = 0; i < 6; i++) *--top = nullptr;
  f.sp = top;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack;
  f.ctx.uc_stack.ss_size = kStack;
  f.ctx.uc_link = &g_sched;
  makecontext(&f.ctx, trampoline, 0);
#endif
}

void switch_to_fiber(Fiber &f) {
#if defined(__x86_64__)
  todre_emu_switch(&g_sched_sp, f.sp);
#else
  swapcontext(&g_sched, &f.ctx);
#endif
}

void bar_wait(Bar &b) {
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    for (Fiber *w : b.waiters) w->waiting = nullptr;
    b.waiters.clear();
    return;
  }
  g_fiber->waiting = &b;
  b.waiters.push_back(g_fiber);
  yield_to_scheduler();
}

int warp_size_of(Block *, int warp) {
  int n = (int)(g_block_dim.x * g_block_dim.y * g_block_dim.z);
  int rest = n - 32 * warp;
  return rest < 32 ? rest : 32;
}

// Runs the fibers of `blocks` together until all finish. false: deadlock.
bool run_fibers(const std::vector<dim3> &blocks, size_t smem, const std::function<void()> &body,
                const void *kernel) {
  const int nt = (int)(g_block_dim.x * g_block_dim.y * g_block_dim.z);
  const int nw = (nt + 31) / 32;
  std::vector<Block> bl(blocks.size());
  std::vector<Fiber> fs(blocks.size() * (size_t)nt);
  Bar grid;
  grid.expected = (int)fs.size();
  g_grid_bar = &grid;
  g_body = &body;
  for (size_t b = 0; b < blocks.size(); b++) {
    Block &B = bl[b];
    B.bar.expected = nt;
    B.warp_bar.resize(nw);
    for (int w = 0; w < nw; w++) B.warp_bar[w].expected = warp_size_of(&B, w);
    B.warp_buf.assign((size_t)nw * 64, 0);
    if (smem) {
      B.smem = malloc(smem);
      memset(B.smem, 0xff, smem);  // shared memory starts as garbage
    }
    for (int t = 0; t < nt; t++) {
      Fiber &f = fs[b * nt + t];
      f.blk = &B;
      f.ts.lin = t;
      f.ts.tid = dim3(t % g_block_dim.x, (t / g_block_dim.x) % g_block_dim.y,
                      t / (g_block_dim.x * g_block_dim.y));
      f.ts.bid = blocks[b];
      f.stack = stack_get();
      fiber_init(f);
    }
  }
  bool ok = true;
  for (;;) {
    bool ran = false, all_done = true;
    for (size_t i = 0; i < fs.size(); i++) {
      Fiber &f = fs[g_order ? fs.size() - 1 - i : i];
      if (f.done) continue;
      all_done = false;
      if (f.waiting) continue;
      ran = true;
      g_fiber = &f;
      g_thread = &f.ts;
      void *save = nullptr;
#ifdef TODRE_EMU_ASAN
      __sanitizer_start_switch_fiber(&save, f.stack, kStack);
#endif
      switch_to_fiber(f);
#ifdef TODRE_EMU_ASAN
      __sanitizer_finish_switch_fiber(save, nullptr, nullptr);
#endif
      (void)save;
    }
    if (all_done) break;
    if (!ran) {
      int waiting = 0, finished = 0;
      for (auto &f : fs) (f.done ? finished : waiting)++;
      violation("barrier deadlock in kernel %p: %d threads wait at a barrier that %d finished "
                "threads never reach (block %u,%u,%u)", kernel, waiting, finished,
                blocks[0].x, blocks[0].y, blocks[0].z);
      ok = false;
      break;
    }
  }
  // Stacks of deadlocked fibers are abandoned with their frames (no unwinding).
  for (auto &f : fs)
    if (f.done) g_stack_pool.push_back(f.stack);
  for (auto &B : bl) free(B.smem);
  g_fiber = nullptr;
  g_thread = nullptr;
  return ok;
}

bool run_grid(dim3 g, dim3 b, size_t smem, bool coop, const std::function<void()> &body,
              const void *kernel) {
  g_grid_dim = g;
  g_block_dim = b;
  std::vector<dim3> all;
  for (unsigned z = 0; z < g.z; z++)
    for (unsigned y = 0; y < g.y; y++)
      for (unsigned x = 0; x < g.x; x++) all.push_back(dim3(x, y, z));
  if (coop) return run_fibers(all, smem, body, kernel);
  for (auto &d : all)
    if (!run_fibers({d}, smem, body, kernel)) return false;
  return true;
}

std::map<const void *, int> g_func_smem;

}  // namespace

// ---- device side -----------------------------------------------------------

void block_sync() { bar_wait(g_fiber->blk->bar); }

int block_sync_or(int p) {
  Block *B = g_fiber->blk;
  block_sync();
  if (g_thread->lin == 0) B->acc = 0;
  block_sync();
  if (p) B->acc |= 1;
  block_sync();
  int r = B->acc;
  block_sync();
  return r;
}

// Double-buffered by parity: a lane cannot start exchange i + 2 before every
// lane has passed exchange i + 1's barrier, so after reading exchange i.
uint64_t warp_xor_exchange(uint64_t v, int lane_mask) {
  Fiber *f = g_fiber;
  int w = f->ts.lin / 32, lane = f->ts.lin % 32;
  uint64_t *buf = &f->blk->warp_buf[(size_t)w * 64 + (f->xchg++ & 1) * 32];
  buf[lane] = v;
  bar_wait(f->blk->warp_bar[w]);
  int src = lane ^ lane_mask;
  return src < f->blk->warp_bar[w].expected ? buf[src] : v;
}

int warp_any(int p) {
  Fiber *f = g_fiber;
  int w = f->ts.lin / 32, lane = f->ts.lin % 32;
  uint64_t *buf = &f->blk->warp_buf[(size_t)w * 64 + (f->xchg++ & 1) * 32];
  buf[lane] = p != 0;
  bar_wait(f->blk->warp_bar[w]);
  int r = 0;
  for (int i = 0; i < f->blk->warp_bar[w].expected; i++) r |= (int)buf[i];
  return r;
}

void count_blas() { g_count.blas_calls++; }
void count_blas_handle() { g_count.blas_handles++; }
void grid_sync() { bar_wait(*g_grid_bar); }
void *dyn_smem() { return g_fiber->blk->smem; }
void set_order(int order) { g_order = order; }

void violation(const char *fmt, ...) {
  g_count.violations++;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "todre CUDA emulator: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

bool device_range(const void *p, size_t bytes) { return classify(p, bytes) == 2; }

void set_func_attr(const void *kernel, int attr, int value, cudaError_t *err) {
  bind_ctx();
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > smem_optin()) {
    *err = set_last(cudaErrorInvalidValue);
    return;
  }
  g_func_smem[kernel] = value;
}

int blocks_per_sm(int threads, size_t smem) {
  if (threads <= 0 || threads > 1024) return 0;
  int by_threads = 2048 / threads;
  int by_smem = smem ? (int)(smem_optin() / smem) : 32;
  int n = by_threads < by_smem ? by_threads : by_smem;
  long cap = env_long("TODRE_EMU_BLOCKS_PER_SM", 1);  // few fibers: few blocks
  return n < cap ? n : (int)cap;
}

cudaError_t enqueue(cudaStream_t s, std::function<void()> op) {
  if (!stream_ok(s)) {
    violation("work queued on a destroyed or unknown stream %p", (void *)s);
    return set_last(cudaErrorInvalidResourceHandle);
  }
  Ctx *c = bind_ctx();
  if (s && s->ctx != c) {
    violation("work queued on a stream of context %p (device %d) while context %p (device %d) "
              "is current", (void *)s->ctx, s->ctx->device, (void *)c, c->device);
    return set_last(cudaErrorInvalidResourceHandle);
  }
  if (capturing(s)) {  // recorded into the graph being captured, not run
    g_count.capture_ops++;
    return cudaSuccess;
  }
  if (!s && legacy_blocked()) {
    g_count.capture_ops++;
    return set_last(cudaErrorStreamCaptureImplicit);
  }
  g_queue.push_back(std::move(op));
  return cudaSuccess;
}

cudaError_t launch_erased(const void *kernel, Cfg c, bool coop, std::function<void()> body) {
  uint64_t nt = (uint64_t)c.b.x * c.b.y * c.b.z;
  if (nt == 0 || nt > 1024 || c.b.x > 1024 || c.b.y > 1024 || c.b.z > 64 || c.g.x == 0 ||
      c.g.y == 0 || c.g.z == 0 || c.g.x > 0x7fffffffu || c.g.y > 65535 || c.g.z > 65535) {
    violation("kernel %p launched with grid (%u,%u,%u) block (%u,%u,%u)", kernel, c.g.x, c.g.y,
              c.g.z, c.b.x, c.b.y, c.b.z);
    return set_last(cudaErrorInvalidConfiguration);
  }
  auto it = g_func_smem.find(kernel);
  int allowed = it == g_func_smem.end() ? kDefaultSmem : (it->second > kDefaultSmem ? it->second : kDefaultSmem);
  if (c.smem > (size_t)allowed) {
    violation("kernel %p launched with %zu bytes of dynamic shared memory, %d allowed "
              "(cudaFuncSetAttribute)", kernel, c.smem, allowed);
    return set_last(cudaErrorInvalidValue);
  }
  if (coop) {
    uint64_t blocks = (uint64_t)c.g.x * c.g.y * c.g.z;
    // TODRE_EMU_COOP_SMS: fewer SMs usable than the device reports (MPS).
    long sms = env_long("TODRE_EMU_COOP_SMS", sm_count());
    if (blocks > (uint64_t)blocks_per_sm((int)nt, c.smem) * (uint64_t)sms)
      return set_last(cudaErrorCooperativeLaunchTooLarge);
  }
  g_count.launches++;
  return enqueue(c.s, [kernel, c, coop, body = std::move(body)]() {
    if (!run_grid(c.g, c.b, c.smem, coop, body, kernel)) g_async = cudaErrorLaunchFailure;
  });
}

}  // namespace emu

using namespace emu;

// ---- runtime API -------------------------------------------------------------

extern "C" {

const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "cudaSuccess";
  case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
  case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
  case cudaErrorNoDevice: return "cudaErrorNoDevice";
  case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
  case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
  case cudaErrorNotReady: return "cudaErrorNotReady";
  case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
  case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  case cudaErrorCooperativeLaunchTooLarge: return "cudaErrorCooperativeLaunchTooLarge";
  case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
  case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
  case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
  case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
  case cudaErrorSymbolNotFound: return "cudaErrorSymbolNotFound";
  case cudaErrorIllegalState: return "cudaErrorIllegalState";
  }
  return "cudaErrorUnknown";
}
const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorNoDevice: return "no CUDA-capable device is detected";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorLaunchFailure: return "unspecified launch failure";
  case cudaErrorInsufficientDriver:
    return "CUDA driver version is insufficient for CUDA runtime version";
  default: return cudaGetErrorName(e);
  }
}
cudaError_t cudaGetLastError(void) {
  cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return g_last; }

// TODRE_EMU_DEVICES=0 emulates a machine whose driver sees no GPU.
cudaError_t cudaDriverGetVersion(int *version) {
  *version = driver_version();
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int *count) {
  g_count.device_queries++;
  *count = 0;
  if (!driver_ok()) return set_last(cudaErrorInsufficientDriver);
  *count = device_count();
  return *count > 0 ? cudaSuccess : set_last(cudaErrorNoDevice);
}
// The device of the current context, else the thread's runtime device.
cudaError_t cudaGetDevice(int *device) {
  *device = t_cur ? t_cur->device : t_dev;
  return cudaSuccess;
}
// CUDA 12+: initialises the device's primary context and makes it current.
cudaError_t cudaSetDevice(int device) {
  if (!driver_ok()) return set_last(cudaErrorInsufficientDriver);
  if (device < 0 || device >= device_count()) return set_last(cudaErrorInvalidDevice);
  t_dev = device;
  Primary &p = primary(device);
  activate(p);
  t_cur = &p.ctx;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
  g_count.device_queries++;
  if (device < 0 || device >= env_long("TODRE_EMU_DEVICES", 1)) return set_last(cudaErrorInvalidDevice);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "libtodre CPU emulator");
  p->totalGlobalMem = (size_t)8 << 30;
  p->sharedMemPerBlock = kDefaultSmem;
  p->maxThreadsPerBlock = 1024;
  p->multiProcessorCount = sm_count();
  p->major = (int)env_long("TODRE_EMU_CC_MAJOR", 9);
  p->minor = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= env_long("TODRE_EMU_DEVICES", 1)) return set_last(cudaErrorInvalidDevice);
  switch (attr) {
  case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
  case cudaDevAttrMultiProcessorCount: *value = sm_count(); return cudaSuccess;
  case cudaDevAttrCooperativeLaunch: *value = 1; return cudaSuccess;
  case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = smem_optin(); return cudaSuccess;
  }
  return set_last(cudaErrorInvalidValue);
}
cudaError_t cudaDeviceSynchronize(void) {
  bind_ctx();
  return host_wait();
}

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
  // Device memory: cudaFree synchronises, so no queued work can still use it.
  Ctx *c = bind_ctx();
  g_count.device_allocs++;
  if (bytes > g_count.device_alloc_max) g_count.device_alloc_max = bytes;
  void *p = nullptr;
  if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) return set_last(cudaErrorMemoryAllocation);
  memset(p, 0xff, bytes);  // fresh device memory holds garbage
  g_allocs[(uintptr_t)p] = {bytes, Mem::device, c->device};
  *ptr = p;
  return cudaSuccess;
}
static cudaError_t free_kind(void *ptr, Mem kind, const char *what) {
  if (!ptr) return cudaSuccess;
  auto it = g_allocs.find((uintptr_t)ptr);
  if (it == g_allocs.end() || it->second.kind != kind) {
    violation("%s(%p): not a pointer that %s returned", what, ptr,
              kind == Mem::device ? "cudaMalloc" : "cudaMallocHost");
    return set_last(cudaErrorInvalidValue);
  }
  flush();  // as on a GPU: freeing waits for queued work (not counted as a host wait)
  g_allocs.erase(it);
  free(ptr);
  return cudaSuccess;
}
cudaError_t cudaFree(void *ptr) { return free_kind(ptr, Mem::device, "cudaFree"); }
cudaError_t cudaMallocHost(void **ptr, size_t bytes) {
  Ctx *c = bind_ctx();
  g_count.host_allocs++;
  void *p = nullptr;
  if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) return set_last(cudaErrorMemoryAllocation);
  g_allocs[(uintptr_t)p] = {bytes, Mem::pinned, c->device};
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void *ptr) { return free_kind(ptr, Mem::pinned, "cudaFreeHost"); }

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr) {
  int k = classify(ptr, 1);
  attr->device = k ? find_alloc(ptr)->second.device : -2;
  attr->type = k == 2 ? cudaMemoryTypeDevice : k == 1 ? cudaMemoryTypeHost : cudaMemoryTypeUnregistered;
  attr->devicePointer = k == 2 ? (void *)ptr : nullptr;
  attr->hostPointer = k == 1 ? (void *)ptr : nullptr;
  return cudaSuccess;
}

static bool copy_ok(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                    int *kd, int *ks) {
  *kd = classify(dst, bytes);
  *ks = classify(src, bytes);
  if (*kd < 0 || *ks < 0) {
    violation("cudaMemcpy of %zu bytes reaches past the end of %s", bytes,
              *kd < 0 ? "the destination allocation" : "the source allocation");
    return false;
  }
  bool want_dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  bool want_src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyDefault &&
      ((*kd == 2) != want_dst_dev || (*ks == 2) != want_src_dev)) {
    violation("cudaMemcpy kind %d does not match the pointers (dst %s, src %s)", (int)kind,
              *kd == 2 ? "device" : "host", *ks == 2 ? "device" : "host");
    return false;
  }
  return true;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  bind_ctx();
  int kd, ks;
  if (!copy_ok(dst, src, bytes, kind, &kd, &ks)) return set_last(cudaErrorInvalidValue);
  cudaError_t e = host_wait();
  memmove(dst, src, bytes);
  return e;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  int kd, ks;
  if (!copy_ok(dst, src, bytes, kind, &kd, &ks)) return set_last(cudaErrorInvalidValue);
  if (!stream_ok(stream)) return enqueue(stream, [] {});
  if (capturing(stream) || (!stream && legacy_blocked())) return enqueue(stream, [] {});
  if (kd == 0) {
    // Into pageable memory: the call returns once the copy is done.
    cudaError_t e = host_wait();
    memmove(dst, src, bytes);
    return e;
  }
  if (ks == 0) {
    // From pageable memory: staged now, so the caller may reuse the source.
    std::vector<char> snap((const char *)src, (const char *)src + bytes);
    return enqueue(stream, [dst, snap = std::move(snap)] { memcpy(dst, snap.data(), snap.size()); });
  }
  return enqueue(stream, [dst, src, bytes] { memmove(dst, src, bytes); });
}
cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
  bind_ctx();
  if (classify(dst, bytes) != 2) {
    violation("cudaMemset of %zu bytes outside device memory", bytes);
    return set_last(cudaErrorInvalidValue);
  }
  cudaError_t e = host_wait();
  memset(dst, value, bytes);
  return e;
}
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream) {
  if (classify(dst, bytes) != 2) {
    violation("cudaMemsetAsync of %zu bytes outside device memory", bytes);
    return set_last(cudaErrorInvalidValue);
  }
  return enqueue(stream, [dst, value, bytes] { memset(dst, value, bytes); });
}

static std::set<cudaEvent_t> g_events;

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags) {
  *stream = new CUstream_st();
  (*stream)->ctx = bind_ctx();
  (*stream)->flags = flags;
  g_streams.insert(*stream);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream || !g_streams.erase(stream)) return set_last(cudaErrorInvalidResourceHandle);
  // Queued work still completes. The handle is kept (never reused) so that a
  // later use is reported as a destroyed stream, not a read of freed memory.
  static auto *destroyed = new std::vector<cudaStream_t>;  // outlives exit-time leak checks
  destroyed->push_back(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!stream_ok(stream)) {
    violation("cudaStreamSynchronize on a destroyed or unknown stream %p", (void *)stream);
    return set_last(cudaErrorInvalidResourceHandle);
  }
  bind_ctx();
  if (capturing(stream) || (!stream && legacy_blocked())) {
    // Not allowed during capture: CUDA fails it and invalidates the capture.
    g_count.capture_ops++;
    return set_last(cudaErrorStreamCaptureUnsupported);
  }
  return host_wait();
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status) {
  if (!stream_ok(stream)) return set_last(cudaErrorInvalidResourceHandle);
  if (!stream && !env_capturing() && legacy_blocked()) return set_last(cudaErrorStreamCaptureImplicit);
  *status = capturing(stream) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  // The legacy stream cannot be captured.
  if (!stream || !stream_ok(stream)) return set_last(cudaErrorStreamCaptureUnsupported);
  if (stream->capturing) return set_last(cudaErrorIllegalState);
  stream->capturing = true;
  stream->mode = mode;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
  if (!stream || !stream_ok(stream) || !stream->capturing) return set_last(cudaErrorIllegalState);
  stream->capturing = false;
  *graph = new CUgraph_st();
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  if (!stream_ok(stream) || !g_events.count(event)) return set_last(cudaErrorInvalidResourceHandle);
  // The event may belong to another context (CUDA allows it). A capturing
  // stream waiting, or a wait on an event recorded during capture, joins
  // the capture.
  if (capturing(stream) || (!stream && legacy_blocked()) || event->captured) g_count.capture_ops++;
  return cudaSuccess;  // one queue: already ordered
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned) {
  g_count.events++;
  *event = new CUevent_st();
  (*event)->ctx = bind_ctx();
  g_events.insert(*event);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!g_events.erase(event)) return set_last(cudaErrorInvalidResourceHandle);
  // The event may still be recorded in queued work: free it when that ran.
  g_queue.push_back([event] { delete event; });
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!g_events.count(event) || !stream_ok(stream)) return set_last(cudaErrorInvalidResourceHandle);
  Ctx *c = bind_ctx(), *sc = stream ? stream->ctx : c;
  if (event->ctx != sc) {
    violation("cudaEventRecord: an event of context %p (device %d) recorded on a stream of "
              "context %p (device %d)", (void *)event->ctx, event->ctx->device, (void *)sc,
              sc->device);
    return set_last(cudaErrorInvalidResourceHandle);
  }
  if (capturing(stream) || (!stream && legacy_blocked())) {
    g_count.capture_ops++;
    event->captured = true;
    return cudaSuccess;
  }
  event->captured = false;
  event->complete = false;
  return enqueue(stream, [event] { event->complete = true; });
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!g_events.count(event)) return set_last(cudaErrorInvalidResourceHandle);
  if (event->captured) {
    g_count.capture_ops++;
    return set_last(cudaErrorStreamCaptureUnsupported);
  }
  if (event->complete) return cudaSuccess;  // the work before it already ran
  return host_wait();
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!g_events.count(event)) return set_last(cudaErrorInvalidResourceHandle);
  flush();  // queued work "progresses" when polled
  return event->complete ? cudaSuccess : cudaErrorNotReady;
}

// ---- driver entry points (CUresult int, CUcontext pointer, CUdevice int) ----

static int drv_ctx_get_current(void **ctx) {
  *ctx = t_cur;
  return 0;
}
static int drv_ctx_set_current(void *ctx) {
  t_cur = (Ctx *)ctx;
  return 0;
}
static int drv_device_get(int *device, int ordinal) {
  if (ordinal < 0 || ordinal >= device_count()) return 101;  // CUDA_ERROR_INVALID_DEVICE
  *device = ordinal;
  return 0;
}
static int drv_primary_retain(void **ctx, int device) {
  if (device < 0 || device >= device_count()) return 101;
  Primary &p = primary(device);
  activate(p);
  p.retains++;
  *ctx = &p.ctx;
  return 0;
}
static int drv_primary_release(int device) {
  if (device < 0 || device >= device_count()) return 101;
  Primary &p = primary(device);
  if (p.retains <= 0) {
    violation("cuDevicePrimaryCtxRelease(%d) without a matching retain", device);
    return 201;  // CUDA_ERROR_INVALID_CONTEXT
  }
  p.retains--;
  return 0;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **func, unsigned version,
                                             unsigned long long,
                                             enum cudaDriverEntryPointQueryResult *status) {
  if (!driver_ok()) return set_last(cudaErrorInsufficientDriver);
  static const struct { const char *name; void *fn; } table[] = {
      {"cuCtxGetCurrent", (void *)drv_ctx_get_current},
      {"cuCtxSetCurrent", (void *)drv_ctx_set_current},
      {"cuDeviceGet", (void *)drv_device_get},
      {"cuDevicePrimaryCtxRetain", (void *)drv_primary_retain},
      {"cuDevicePrimaryCtxRelease", (void *)drv_primary_release},
  };
  *func = nullptr;
  if (status) *status = cudaDriverEntryPointSymbolNotFound;
  if (version > (unsigned)driver_version()) {
    if (status) *status = cudaDriverEntryPointVersionNotSufficent;
    return cudaSuccess;
  }
  for (auto &e : table)
    if (strcmp(e.name, symbol) == 0) {
      *func = e.fn;
      if (status) *status = cudaDriverEntryPointSuccess;
    }
  return cudaSuccess;
}

void *todre_emu_ctx_get_current(void) { return t_cur; }
void todre_emu_ctx_set_current(void *ctx) { t_cur = (Ctx *)ctx; }
void *todre_emu_ctx_create(int device) {
  if (g_user_ctx_count == kMaxUserContexts) {
    violation("todre_emu_ctx_create: more than %d contexts", kMaxUserContexts);
    return nullptr;
  }
  Ctx *c = &g_user_ctx[g_user_ctx_count++];
  *c = {device, false};
  t_cur = c;
  return c;
}
int todre_emu_primary_active(int device) { return primary(device).active; }
int todre_emu_primary_retains(int device) { return primary(device).retains; }
void todre_emu_reset_alloc_max(void) { g_count.device_alloc_max = 0; }

void todre_emu_get_counters(struct todre_emu_counters *out) { *out = g_count; }

}  // extern "C"
