// A collective inside an XLA cluster (tf.function(jit_compile=True), Keras 3's default on a GPU).
//
// XLA compiles a whole function and has no kernel for a Python op, so the bindings' crossing
// becomes the op `BlinkflowXlaCall`, which XLA lowers to a side-effecting custom call
// ("blinkflow_xla_call", typed FFI). When the compiled program runs, the custom call hands its
// input and output buffers to a callback that Python installed (`blinkflow_xla_set_callback`),
// which runs the collective on the runtime and writes the results in place: the model's compute
// stays compiled and only the collective leaves the cluster.
//
// The call is found by `call_id`, an attribute (the custom call's backend config), so no buffer
// has to be read on the host to find it. Every call takes the `after` token of the previous call
// of the same function and returns its own (`done`): a data dependency that keeps XLA from
// reordering two collectives, so every rank runs them in the same order.
//
// Platforms: "Host" (XLA:CPU, buffers in host memory) and "CUDA" (XLA:GPU, device buffers; the
// callback gets XLA's stream and orders itself after it).
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tensorflow/compiler/tf2xla/shape_util.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/kernel_def_builder.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "xla/ffi/api/ffi.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape_util.h"

namespace xla::ffi {
// XLA's FFI table, exported by libtensorflow_cc (declared in xla/ffi/ffi_api.h, whose other
// includes TensorFlow does not ship).
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace xla::ffi

namespace ffi = xla::ffi;

// Python's side: runs call `call_id` on the buffers; returns 0 or an absl status code, with the
// message in `error` (NUL-terminated, at most `error_len` bytes). A descriptor lists, per buffer,
// its rank then its dimensions.
using BlinkflowXlaCallback = int (*)(int64_t call_id, int64_t n_in, const int64_t* in_desc, void* const* in_ptrs,
                                     int64_t n_out, const int64_t* out_desc, void* const* out_ptrs, void* stream,
                                     char* error, int64_t error_len);

static std::atomic<BlinkflowXlaCallback> g_callback{nullptr};

extern "C" void blinkflow_xla_set_callback(BlinkflowXlaCallback callback) { g_callback.store(callback); }

namespace {

constexpr int kErrorLen = 4096;

void Describe(const ffi::AnyBuffer& buffer, std::vector<int64_t>* desc) {
  auto dims = buffer.dimensions();
  desc->push_back(static_cast<int64_t>(dims.size()));
  desc->insert(desc->end(), dims.begin(), dims.end());
}

// args: after, inputs...; rets: outputs..., done.
ffi::Error Run(void* stream, int64_t call_id, ffi::RemainingArgs args, ffi::RemainingRets rets) {
  BlinkflowXlaCallback callback = g_callback.load();
  if (callback == nullptr) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "blinkflow: an XLA-compiled collective ran before blinkflow installed its callback "
                      "(import blinkflow.tensorflow and call init() first)");
  }
  std::vector<int64_t> in_desc, out_desc;
  std::vector<void*> in_ptrs, out_ptrs;
  for (size_t i = 1; i < args.size(); ++i) {
    auto buffer = args.get<ffi::AnyBuffer>(i);
    if (buffer.has_error()) return buffer.error();
    Describe(*buffer, &in_desc);
    in_ptrs.push_back(buffer->untyped_data());
  }
  for (size_t i = 0; i + 1 < rets.size(); ++i) {
    auto buffer = rets.get<ffi::AnyBuffer>(i);
    if (buffer.has_error()) return buffer.error();
    Describe(**buffer, &out_desc);
    out_ptrs.push_back((*buffer)->untyped_data());
  }
  char error[kErrorLen];
  error[0] = '\0';
  int code = callback(call_id, static_cast<int64_t>(in_ptrs.size()), in_desc.data(), in_ptrs.data(),
                      static_cast<int64_t>(out_ptrs.size()), out_desc.data(), out_ptrs.data(), stream, error,
                      kErrorLen);
  if (code != 0) {
    error[kErrorLen - 1] = '\0';
    return ffi::Error(static_cast<ffi::ErrorCode>(code), std::string(error));
  }
  return ffi::Error::Success();
}

ffi::Error RunOnHost(int64_t call_id, ffi::RemainingArgs args, ffi::RemainingRets rets) {
  return Run(nullptr, call_id, args, rets);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER(kBlinkflowXlaCallHost, RunOnHost,
                       ffi::Ffi::Bind().Attr<int64_t>("call_id").RemainingArgs().RemainingRets());
XLA_FFI_DEFINE_HANDLER(kBlinkflowXlaCallCuda, Run,
                       ffi::Ffi::Bind()
                           .Ctx<ffi::PlatformStream<void*>>()
                           .Attr<int64_t>("call_id")
                           .RemainingArgs()
                           .RemainingRets());
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), "blinkflow_xla_call", "Host", kBlinkflowXlaCallHost);
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), "blinkflow_xla_call", "CUDA", kBlinkflowXlaCallCuda);

namespace tensorflow {

REGISTER_OP("BlinkflowXlaCall")
    .Input("after: int64")
    .Input("inputs: Tin")
    .Output("outputs: Tout")
    .Output("done: int64")
    .Attr("Tin: list(type) >= 0")
    .Attr("Tout: list(type) >= 0")
    .Attr("out_shapes: list(shape) >= 0")
    .Attr("call_id: int")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      std::vector<PartialTensorShape> shapes;
      TF_RETURN_IF_ERROR(c->GetAttr("out_shapes", &shapes));
      for (size_t i = 0; i < shapes.size(); ++i) {
        shape_inference::ShapeHandle handle;
        TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shapes[i], &handle));
        c->set_output(static_cast<int>(i), handle);
      }
      c->set_output(static_cast<int>(shapes.size()), c->Scalar());
      return absl::OkStatus();
    })
    .Doc("A blinkflow collective inside an XLA cluster; lowered to the custom call blinkflow_xla_call.");

class BlinkflowXlaCallOp : public XlaOpKernel {
 public:
  explicit BlinkflowXlaCallOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("call_id", &call_id_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("out_shapes", &out_shapes_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("Tout", &out_types_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    std::vector<xla::XlaOp> inputs;
    std::vector<TensorShape> input_shapes;
    OP_REQUIRES_OK(ctx, ctx->InputList("inputs", &inputs, &input_shapes));
    std::vector<xla::XlaOp> operands{ctx->Input(0)};
    operands.insert(operands.end(), inputs.begin(), inputs.end());

    std::vector<xla::Shape> result_shapes;
    for (size_t i = 0; i < out_shapes_.size(); ++i) {
      TensorShape shape;
      OP_REQUIRES(ctx, out_shapes_[i].AsTensorShape(&shape),
                  errors::InvalidArgument("blinkflow: output ", i, " of an XLA-compiled collective has no static "
                                          "shape (", out_shapes_[i].DebugString(), ")"));
      xla::Shape xla_shape;
      OP_REQUIRES_OK(ctx, TensorShapeToXLAShape(out_types_[i], shape, &xla_shape));
      result_shapes.push_back(xla_shape);
    }
    result_shapes.push_back(xla::ShapeUtil::MakeShape(xla::S64, {}));
    xla::XlaOp call = xla::CustomCall(ctx->builder(), "blinkflow_xla_call", operands,
                                      xla::ShapeUtil::MakeTupleShape(result_shapes),
                                      "{call_id = " + std::to_string(call_id_) + " : i64}",
                                      /*has_side_effect=*/true, /*output_operand_aliasing=*/{},
                                      /*literal=*/nullptr, xla::CustomCallSchedule::SCHEDULE_NONE,
                                      xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
    for (size_t i = 0; i < result_shapes.size(); ++i) {
      ctx->SetOutput(static_cast<int>(i), xla::GetTupleElement(call, static_cast<int64_t>(i)));
    }
  }

 private:
  int64_t call_id_;
  std::vector<PartialTensorShape> out_shapes_;
  DataTypeVector out_types_;
};

REGISTER_XLA_OP(Name("BlinkflowXlaCall"), BlinkflowXlaCallOp);

}  // namespace tensorflow

namespace {

tensorflow::OpKernel* CreateXlaCallKernel(tensorflow::OpKernelConstruction* context) {
  return new tensorflow::BlinkflowXlaCallOp(context);
}

}  // namespace

// REGISTER_XLA_OP only records the op: TensorFlow turns the records into kernels for its XLA
// devices once per process, and a library loaded after that (blinkflow loads it when a function
// first needs it) would have none. So: have TensorFlow register its XLA kernels now if it has
// not yet (ours among them), then add ours to each XLA device that still lacks it.
// Returns how many devices this call added the kernel to.
extern "C" int blinkflow_xla_register_kernels() {
  tensorflow::XlaOpRegistry::RegisterCompilationKernels();
  tensorflow::NodeDef probe;
  probe.set_op("BlinkflowXlaCall");
  (*probe.mutable_attr())["Tin"].mutable_list()->add_type(tensorflow::DT_FLOAT);
  (*probe.mutable_attr())["Tout"].mutable_list()->add_type(tensorflow::DT_FLOAT);
  int added = 0;
  for (const char* device : {"XLA_CPU_JIT", "XLA_GPU_JIT"}) {
    if (tensorflow::KernelDefAvailable(tensorflow::DeviceType(device), probe)) continue;
    const tensorflow::KernelDef* def = tensorflow::KernelDefBuilder("BlinkflowXlaCall").Device(device).Build();
    new tensorflow::kernel_factory::OpKernelRegistrar(def, "BlinkflowXlaCallOp", CreateXlaCallKernel);
    ++added;
  }
  return added;
}
