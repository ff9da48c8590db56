// BlinkflowAwait(ticket): an asynchronous kernel that completes when the runtime says the
// collective behind `ticket` finished (blinkflow_mark_done(ticket), called from Python through
// ctypes), and outputs the ticket. Horovod's ops are AsyncOpKernels for the same reason: in a
// TF1 graph run by a Session there are no automatic control dependencies, so a rank's executor
// may start its collectives in another order than its peers'; a kernel that blocked its thread
// until the others joined would leave every thread of two ranks waiting for a collective the
// other rank has no thread left to start. Waiting here holds no thread.
// Compiled on first use by _op_library.py against the installed TensorFlow's headers.
#include <functional>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/threadpool.h"
using namespace tensorflow;

namespace {
// Tickets that finished before their kernel ran, and kernels waiting for their ticket.
class Board {
 public:
  static Board& get() {
    static Board board;
    return board;
  }
  void wait(int64_t ticket, std::function<void()> resume) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_.erase(ticket) == 0) {
        waiting_[ticket] = std::move(resume);
        return;
      }
    }
    resume();
  }
  void mark(int64_t ticket) {
    std::function<void()> resume;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = waiting_.find(ticket);
      if (it == waiting_.end()) {
        finished_.insert(ticket);
        return;
      }
      resume = std::move(it->second);
      waiting_.erase(it);
    }
    resume();
  }

 private:
  std::mutex mu_;
  std::unordered_set<int64_t> finished_;
  std::unordered_map<int64_t, std::function<void()>> waiting_;
};
}  // namespace

extern "C" void blinkflow_mark_done(long long ticket) { Board::get().mark(ticket); }

REGISTER_OP("BlinkflowAwait")
    .Input("ticket: int64")
    .Output("same: int64")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    });

class BlinkflowAwaitOp : public AsyncOpKernel {
 public:
  explicit BlinkflowAwaitOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {}
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    ctx->set_output(0, ctx->input(0));
    const int64_t ticket = ctx->input(0).scalar<int64_t>()();
    thread::ThreadPool* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
    // `done` runs on TensorFlow's own threads: never on the Python thread that marks the ticket.
    Board::get().wait(ticket, [workers, done]() { workers->Schedule(done); });
  }
};
REGISTER_KERNEL_BUILDER(Name("BlinkflowAwait").Device(DEVICE_CPU), BlinkflowAwaitOp);
