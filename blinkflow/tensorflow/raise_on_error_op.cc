// BlinkflowRaiseOnError(code, message): fails with the given absl status code (int64) and
// message (its UTF-8 bytes, uint8) when code != 0, else does nothing. It takes the status as the
// crossing's Python function returns it, so no op runs between the two to convert it. blinkflow's collectives run inside a graph through
// tf.numpy_function, which turns every Python exception into UNKNOWN; this op lets a runtime
// error keep its code (a cross-rank mismatch is FAILED_PRECONDITION) and its message.
// Compiled on first use by _op_library.py against the installed TensorFlow's headers.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
using namespace tensorflow;
REGISTER_OP("BlinkflowRaiseOnError")
    .Input("code: int64")
    .Input("message: uint8")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext*) { return absl::OkStatus(); });
class BlinkflowRaiseOnErrorOp : public OpKernel {
 public:
  explicit BlinkflowRaiseOnErrorOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const int64_t code = ctx->input(0).scalar<int64_t>()();
    if (code == 0) return;
    const auto bytes = ctx->input(1).flat<uint8>();
    const std::string message(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    ctx->SetStatus(absl::Status(static_cast<absl::StatusCode>(code), message));
  }
};
REGISTER_KERNEL_BUILDER(Name("BlinkflowRaiseOnError").Device(DEVICE_CPU), BlinkflowRaiseOnErrorOp);
