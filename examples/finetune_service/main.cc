// A prediction service that fine-tunes itself: it serves Fashion-MNIST test predictions from
// a model, then fine-tunes only the last layer (fc2.*) on a labelled stream with 2 replicas
// while the same Model object keeps serving, and reports accuracy before and after. Uses only
// the public API (<onnx_mirror/onnx_mirror.h>). Run with --help for the options.
#include <onnx_mirror/onnx_mirror.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <string>

namespace {

struct Args {
  std::string model = "models/cnn.onnx";
  bool trained = false;          // --trained: the model is already trained, skip warm-up
  int64_t warmup_steps = 150;    // brief training on the first part of the train split
  int64_t finetune_steps = 300;  // last-layer fine-tuning on the stream
  int64_t batch = 64;
  int replicas = 2;
  std::string save;              // write the fine-tuned model here
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--model") a.model = value();
    else if (flag == "--trained") a.trained = true;
    else if (flag == "--warmup-steps") a.warmup_steps = std::stoll(value());
    else if (flag == "--finetune-steps") a.finetune_steps = std::stoll(value());
    else if (flag == "--batch") a.batch = std::stoll(value());
    else if (flag == "--replicas") a.replicas = std::stoi(value());
    else if (flag == "--save") a.save = value();
    else {
      std::cout << "usage: finetune_service [--model cnn.onnx] [--trained] [--warmup-steps N]\n"
                   "         [--finetune-steps N] [--batch N] [--replicas N] [--save out.onnx]\n";
      std::exit(flag == "--help" ? 0 : 2);
    }
  }
  return a;
}

// The service's job: predict the test set in request-sized chunks and score the answers.
double serve_test_set(onnx_mirror::Model& model, const onnx_mirror::Tensor& x, const onnx_mirror::Tensor& y,
                      int replicas) {
  int64_t correct = 0;
  const int64_t n = x.dim(0), request = 500;
  for (int64_t begin = 0; begin < n; begin += request) {
    const int64_t end = std::min(n, begin + request);
    const onnx_mirror::Tensor logits = model.predict(x.slice_rows(begin, end), replicas);
    const int64_t classes = logits.dim(1);
    for (int64_t i = 0; i < end - begin; ++i) {
      const float* row = logits.data<float>() + i * classes;
      int64_t best = 0;
      for (int64_t c = 1; c < classes; ++c)
        if (row[c] > row[best]) best = c;
      correct += best == y.data<int64_t>()[begin + i];
    }
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

// A labelled stream: consecutive batches of rows [begin, end) of the data, wrapping around.
struct Stream {
  const onnx_mirror::Tensor& x;
  const onnx_mirror::Tensor& y;
  int64_t begin, end, pos;
};

// Runs steps (first, last] of a run of `total` steps over the stream, printing the mean loss
// every 100 steps.
void train_on_stream(onnx_mirror::Trainer& trainer, Stream& stream, int64_t first, int64_t last, int64_t total,
                     int64_t batch, const char* what) {
  double loss_sum = 0;
  int64_t counted = 0;
  for (int64_t s = first + 1; s <= last; ++s) {
    if (stream.pos + batch > stream.end) stream.pos = stream.begin;
    loss_sum += trainer.step(stream.x.slice_rows(stream.pos, stream.pos + batch),
                             stream.y.slice_rows(stream.pos, stream.pos + batch));
    stream.pos += batch;
    ++counted;
    if (s % 100 == 0 || s == last) {
      std::cout << "  " << what << " step " << s << "/" << total << ": mean loss " << std::fixed
                << std::setprecision(4) << loss_sum / static_cast<double>(counted) << "\n";
      loss_sum = 0;
      counted = 0;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse(argc, argv);
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    onnx_mirror::Model model = onnx_mirror::Model::load(args.model);
    const onnx_mirror::Dataset train = onnx_mirror::load_dataset("fashion-mnist:train");
    const onnx_mirror::Dataset test = onnx_mirror::load_dataset("fashion-mnist:test");
    const onnx_mirror::Tensor train_x = model.prepare(train.features), test_x = model.prepare(test.features);
    // The first 20000 training images stand for the data the model was built with, the
    // rest for the labelled stream that arrives while it serves.
    const int64_t split = 20000;

    if (!args.trained) {
      std::cout << "warm-up: training every layer for " << args.warmup_steps << " steps on train[0:" << split << ")\n";
      onnx_mirror::TrainerOptions o;
      o.optimizer = "sgd";
      o.lr = 0.05f;
      o.momentum = 0.9f;
      o.replicas = args.replicas;
      onnx_mirror::Trainer warmup(model, o);
      Stream seen{train_x, train.labels, 0, split, 0};
      train_on_stream(warmup, seen, 0, args.warmup_steps, args.warmup_steps, args.batch, "warm-up");
    }

    const onnx_mirror::Tensor frozen_before = model.parameter("conv1.weight");
    const double before = serve_test_set(model, test_x, test.labels, args.replicas);
    std::cout << "serving: test accuracy before fine-tuning " << std::fixed << std::setprecision(4) << before
              << " (" << test.size() << " images, " << args.replicas << " replicas)\n";

    onnx_mirror::TrainerOptions o;
    o.optimizer = "sgd";
    o.lr = 0.05f;
    o.momentum = 0.9f;
    o.replicas = args.replicas;
    o.train_regex = "^fc2\\.";
    onnx_mirror::Trainer finetune(model, o);
    std::cout << "fine-tuning " << finetune.trainable().size() << " parameters (";
    for (const auto& p : finetune.trainable()) std::cout << p << (p == finetune.trainable().back() ? "" : ", ");
    std::cout << "), " << finetune.frozen().size() << " frozen, for " << args.finetune_steps
              << " steps on the stream train[" << split << ":" << train.size() << ") with " << args.replicas
              << " replicas\n";
    const int64_t half = args.finetune_steps / 2;
    Stream stream{train_x, train.labels, split, train.size(), split};
    train_on_stream(finetune, stream, 0, half, args.finetune_steps, args.batch, "fine-tune");
    std::cout << "serving mid-way (same Model, no reload): test accuracy "
              << serve_test_set(model, test_x, test.labels, args.replicas) << "\n";
    train_on_stream(finetune, stream, half, args.finetune_steps, args.finetune_steps, args.batch, "fine-tune");

    const double after = serve_test_set(model, test_x, test.labels, args.replicas);
    const onnx_mirror::Tensor frozen_after = model.parameter("conv1.weight");
    const bool untouched = std::memcmp(frozen_before.raw(), frozen_after.raw(), frozen_before.nbytes()) == 0;
    std::cout << "serving: test accuracy after fine-tuning " << after << " (before " << before << ", "
              << (after >= before ? "+" : "") << (after - before) * 100 << " points)\n"
              << "frozen conv1.weight bit-identical: " << (untouched ? "yes" : "NO") << "\n";
    if (!args.save.empty()) {
      model.save(args.save);
      std::cout << "saved the fine-tuned model to " << args.save << "\n";
    }
    std::cout << "total " << std::chrono::duration<double>(Clock::now() - t0).count() << " s\n";
    return untouched ? 0 : 1;
  } catch (const onnx_mirror::Error& e) {
    std::cerr << "error (" << onnx_mirror::error_kind_name(e.kind()) << "): " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
