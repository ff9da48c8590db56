// BlinkflowRaiseOnError(code, message): fails with the given absl status code and message
// when code != 0, else does nothing. blinkflow's collectives run inside a graph through
// tf.numpy_function, which turns every Python exception into UNKNOWN; this op lets a runtime
// error keep its code (a cross-rank mismatch is FAILED_PRECONDITION) and its message.
// Compiled on first use by _errors.py against the installed TensorFlow's headers.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
using namespace tensorflow;
REGISTER_OP("BlinkflowRaiseOnError")
    .Input("code: int32")
    .Input("message: string")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext*) { return absl::OkStatus(); });
class BlinkflowRaiseOnErrorOp : public OpKernel {
 public:
  explicit BlinkflowRaiseOnErrorOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const int code = ctx->input(0).scalar<int32>()();
    if (code == 0) return;
    const std::string message(ctx->input(1).scalar<tstring>()());
    ctx->SetStatus(absl::Status(static_cast<absl::StatusCode>(code), message));
  }
};
REGISTER_KERNEL_BUILDER(Name("BlinkflowRaiseOnError").Device(DEVICE_CPU), BlinkflowRaiseOnErrorOp);
