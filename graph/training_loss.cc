// Pass 6 of build_training_graph (graph/training_passes.h): the loss nodes and the labels input.
#include <cmath>

#include "graph/training_passes.h"

namespace omt {

void append_loss(TrainingGraph& tg, const TrainingSpec& spec, const ValueInfo& output, NameSource& names) {
  Graph& g = tg.model.graph;
  std::string out = output.name;
  auto add = [&](Node n) { g.nodes.push_back(std::move(n)); };
  const int64_t out_rank = output.shape ? static_cast<int64_t>(output.shape->size()) : 2;
  int64_t class_axis = 1;
  if (loss_takes_class_labels(spec.loss) && out_rank >= 2) {
    class_axis = spec.class_axis < 0 ? spec.class_axis + out_rank : spec.class_axis;
    OMT_CHECK(class_axis >= 1 && class_axis < out_rank, kInvalidArgument, "--class-axis ", spec.class_axis,
              " is not an axis after the batch axis of output '", out, "' ", output.shape_str(),
              "; use -1 (the last, [B, T, C]) or 1 ([N, C, H, W])");
  }
  tg.loss = names.fresh("loss");
  if (spec.loss != LossKind::kModel) {
    OMT_CHECK(!g.find_input(spec.labels) && !g.initializers.has(spec.labels), kInvalidArgument,
              "--labels '", spec.labels, "' is already a name in the model (an input or initializer); "
              "choose another name for the label array");
    tg.labels = spec.labels;
    ValueInfo labels;
    labels.name = spec.labels;
    const bool class_labels = loss_takes_class_labels(spec.loss);
    labels.dtype = class_labels ? DType::kInt64 : output.dtype;
    if (output.shape) {
      std::vector<Dim> dims = *output.shape;
      if (class_labels && dims.size() >= 2) dims.erase(dims.begin() + class_axis);
      labels.shape = dims;
    }
    g.inputs.push_back(labels);
  }
  // ONNX's class losses read the classes on axis 1: move them there when they are elsewhere.
  if (loss_takes_class_labels(spec.loss) && class_axis != 1) {
    std::vector<int64_t> perm{0, class_axis};
    for (int64_t d = 1; d < out_rank; ++d)
      if (d != class_axis) perm.push_back(d);
    const std::string moved = names.fresh(out + "/classes_on_axis_1");
    Node t = make_node(names, "Transpose", "omt/loss/Transpose", {out}, {moved});
    t.attrs.set("perm", perm);
    add(t);
    out = moved;
  }
  OMT_CHECK(std::isfinite(spec.label_smoothing) && spec.label_smoothing >= 0 && spec.label_smoothing <= 1,
            kInvalidArgument, "--label-smoothing must be in [0, 1], got ", spec.label_smoothing);
  OMT_CHECK(spec.label_smoothing == 0 || spec.loss == LossKind::kSoftmaxCrossEntropy, kInvalidArgument,
            "--label-smoothing applies to the softmax cross-entropy loss, not ", loss_kind_name(spec.loss));
  auto constant = [&](const std::string& base, const Tensor& value) {
    const std::string name = names.fresh(base);
    Node c = make_node(names, "Constant", base + "_const", {}, {name});
    c.attrs.set("value", value);
    add(c);
    return name;
  };
  switch (spec.loss) {
    case LossKind::kSoftmaxCrossEntropy: {
      if (spec.label_smoothing == 0) {
        Node n = make_node(names, "SoftmaxCrossEntropyLoss", "omt/loss/SoftmaxCrossEntropyLoss",
                           {out, spec.labels}, {tg.loss, names.fresh("omt/loss/log_prob")});
        n.attrs.set("reduction", std::string("mean"));
        n.attrs.set("ignore_index", spec.ignore_index);
        add(n);
        break;
      }
      // Note [Label smoothing]: torch.nn.functional.cross_entropy's formula over the positions
      // that count (labels not ignore_index), (1 - eps) * mean(-log p[label]) + eps *
      // sum(-mean_c log p) / count, from one LogSoftmax; ONNX's SoftmaxCrossEntropyLoss has
      // no smoothing.
      const float eps = spec.label_smoothing;
      const std::string lp = names.fresh("omt/loss/log_prob"), nll = names.fresh("omt/loss/nll");
      Node ls = make_node(names, "LogSoftmax", "omt/loss/LogSoftmax", {out}, {lp});
      ls.attrs.set("axis", int64_t{1});
      add(ls);
      Node n = make_node(names, "NegativeLogLikelihoodLoss", "omt/loss/NegativeLogLikelihoodLoss", {lp, spec.labels},
                         {nll});
      n.attrs.set("reduction", std::string("mean"));
      n.attrs.set("ignore_index", spec.ignore_index);
      add(n);
      const std::string per_position = names.fresh("omt/loss/mean_log_prob");
      Node mean = make_node(names, "ReduceMean", "omt/loss/ReduceMean",
                            {lp, constant("omt/loss/class_axis", Tensor::from_vector<int64_t>({1}, {1}))}, {per_position});
      mean.attrs.set("keepdims", int64_t{0});
      add(mean);
      const std::string ignored = names.fresh("omt/loss/ignored"), counted = names.fresh("omt/loss/counted"),
                        weight = names.fresh("omt/loss/weight");
      add(make_node(names, "Equal", "omt/loss/Equal",
                    {spec.labels, constant("omt/loss/ignore_index", Tensor::scalar<int64_t>(spec.ignore_index))}, {ignored}));
      add(make_node(names, "Not", "omt/loss/Not", {ignored}, {counted}));
      Node cast = make_node(names, "Cast", "omt/loss/Cast", {counted}, {weight});
      cast.attrs.set("to", static_cast<int64_t>(output.dtype == DType::kFloat64 ? 11 : 1));
      add(cast);
      const std::string weighted = names.fresh("omt/loss/weighted"), total = names.fresh("omt/loss/total"),
                        count = names.fresh("omt/loss/count"), smooth = names.fresh("omt/loss/smooth");
      add(make_node(names, "Mul", "omt/loss/Mul", {per_position, weight}, {weighted}));
      Node sum = make_node(names, "ReduceSum", "omt/loss/ReduceSum", {weighted}, {total});
      sum.attrs.set("keepdims", int64_t{0});
      add(sum);
      Node cnt = make_node(names, "ReduceSum", "omt/loss/ReduceSum", {weight}, {count});
      cnt.attrs.set("keepdims", int64_t{0});
      add(cnt);
      add(make_node(names, "Div", "omt/loss/Div", {total, count}, {smooth}));
      auto scalar = [&](const std::string& base, double v) {
        return constant(base, output.dtype == DType::kFloat64 ? Tensor::scalar<double>(v)
                                                                : Tensor::scalar<float>(static_cast<float>(v)));
      };
      const std::string a = names.fresh("omt/loss/nll_part"), b = names.fresh("omt/loss/smooth_part");
      add(make_node(names, "Mul", "omt/loss/Mul", {nll, scalar("omt/loss/keep", 1.0 - eps)}, {a}));
      add(make_node(names, "Mul", "omt/loss/Mul", {smooth, scalar("omt/loss/minus_eps", -static_cast<double>(eps))}, {b}));
      add(make_node(names, "Add", "omt/loss/Add", {a, b}, {tg.loss}));
      break;
    }
    case LossKind::kNll: {
      Node n = make_node(names, "NegativeLogLikelihoodLoss", "omt/loss/NegativeLogLikelihoodLoss",
                         {out, spec.labels}, {tg.loss});
      n.attrs.set("reduction", std::string("mean"));
      n.attrs.set("ignore_index", spec.ignore_index);
      add(n);
      break;
    }
    case LossKind::kMse: {
      const std::string diff = names.fresh("omt/loss/diff"), sq = names.fresh("omt/loss/sq");
      add(make_node(names, "Sub", "omt/loss/Sub", {out, spec.labels}, {diff}));
      add(make_node(names, "Mul", "omt/loss/Mul", {diff, diff}, {sq}));
      Node mean = make_node(names, "ReduceMean", "omt/loss/ReduceMean", {sq}, {tg.loss});
      mean.attrs.set("keepdims", int64_t{0});
      add(mean);
      break;
    }
    case LossKind::kL1: {  // torch.nn.L1Loss: mean |output - target| (Abs'(0) = 0)
      const std::string diff = names.fresh("omt/loss/diff"), abs = names.fresh("omt/loss/abs");
      add(make_node(names, "Sub", "omt/loss/Sub", {out, spec.labels}, {diff}));
      add(make_node(names, "Abs", "omt/loss/Abs", {diff}, {abs}));
      Node mean = make_node(names, "ReduceMean", "omt/loss/ReduceMean", {abs}, {tg.loss});
      mean.attrs.set("keepdims", int64_t{0});
      add(mean);
      break;
    }
    case LossKind::kBceWithLogits:
      add(make_node(names, "BCEWithLogitsLoss", "omt/loss/BCEWithLogitsLoss", {out, spec.labels},
                    {tg.loss}, kOmtDomain));
      break;
    case LossKind::kModel: {
      OMT_CHECK(!output.shape || output.shape->empty() ||
                    (output.shape->size() == 1 && (*output.shape)[0].value == 1),
                kInvalidArgument, "--loss model needs a scalar loss output, but '", out, "' has shape ",
                output.shape_str(), ". Pick another --output or a loss kind such as mse.");
      add(make_node(names, "Identity", "omt/loss/Identity", {out}, {tg.loss}));
      break;
    }
  }

}

}  // namespace omt
