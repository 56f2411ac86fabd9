// FitRun's end of a run: the trained model (written first, Note [Late outputs] in fit.cc), the
// last checkpoint and the trace, the final evaluation, the --compare-single measurement and
// the report (summary lines, the metrics file's summary, the HTML report).
#include "runtime/fit_run.h"

#include <algorithm>
#include <cmath>

#include "graph/onnx_io.h"
#include "runtime/report.h"

namespace omt {

namespace {

// "mse 0.01234, mae 0.08765", with the loss first when it is neither of them.
std::string regression_summary(const EvalResult& ev, LossKind loss) {
  std::string s;
  if (loss != LossKind::kMse && loss != LossKind::kL1) s = str_cat("loss (", loss_kind_name(loss), ") ", sig(ev.loss), ", ");
  return s + "mse " + sig(ev.mse) + ", mae " + sig(ev.mae);
}

}  // namespace

void FitRun::finish(const SamplerPosition& next) {
  result.steps_done = step;
  if (o.check_every >= 0) trainer.check_consistency();
  result.trained = trainer.trained_model();
  if (leader && !o.output_path.empty() && late.attempt([&] { save_onnx(result.trained, o.output_path); })) {
    late.written(o.output_path);  // first: Note [Late outputs]
    log << "wrote " << o.output_path << "\n";
  }
  if (!result.interrupted) save(next);
  if (leader && !result.last_checkpoint.empty()) late.written(result.last_checkpoint);
  result.samples_per_s = median_after_warmup(rates);
  if (o.mirror.trace && leader && !o.trace_path.empty() && late.attempt([&] { trainer.write_trace(o.trace_path); }))
    late.written(o.trace_path);
}

void FitRun::final_evaluation() {
  if (leader) result.final_eval = val ? evaluate_on(*xv, yv) : evaluate_on(x, y);
}

// Note [Speed-up on a copy]: --compare-single times up to 40 steps of one replica, in this
// process, on a MirroredTrainer of its own. It starts from the model's initializers (the
// trained parameters when the caller shares its store) and trains copies of them (no shared
// parameters), so the run's trainer, and the parameters and optimizer state the caller goes
// on with, are untouched.
void FitRun::measure_single() {
  if (!leader || !o.compare_single || result.interrupted) return;
  MirrorOptions single = o.mirror;
  single.replicas = 1;
  single.comm = nullptr;
  single.config_check = nullptr;
  single.trace = false;
  single.stop = nullptr;
  single.shared_parameters = NamedTensors();
  single.threads_per_replica = std::max(1, o.mirror.threads_per_replica);
  MirroredTrainer one(model, o.spec, single);
  EpochSampler s1(x.size(), o.global_batch, 1, o.seed, o.shuffle);
  std::vector<double> r1;
  const int64_t n1 = std::min<int64_t>(std::max<int64_t>(spe, 1), 40);
  for (int64_t s = 0; s < n1; ++s) {
    const GlobalBatch gb = s1.batch(0, s);
    std::vector<ReplicaBatch> shard(1);
    shard[0].inputs = x.gather(gb.indices);
    shard[0].labels = y.gather(gb.indices);
    if (class_labels) shard[0].loss_count = counted_labels(shard[0].labels, o.spec.ignore_index);
    if (shard[0].weight() == 0) continue;
    const MirroredStepResult res = one.step(shard, gb.size(), o.lr, shard[0].weight());
    r1.push_back(static_cast<double>(gb.size()) / (res.timing.step_ms / 1000.0));
  }
  result.single_samples_per_s = median_after_warmup(r1);
}

void FitRun::report() {
  if (!leader) return;
  const int world = trainer.world_size();
  const EvalResult& ev = result.final_eval;
  const char* set = val ? "validation" : "training";
  if (regression)
    log << "\n" << set << " set: " << ev.samples << " samples, " << regression_summary(ev, loss) << "\n";
  else if (ev.tokens)
    log << "\n" << set << " set: " << ev.samples << " samples, " << ev.positions << " counted tokens, token accuracy "
        << fmt(100 * ev.accuracy, 2) << "%, loss " << fmt(ev.loss) << ", perplexity " << sig(ev.perplexity) << "\n";
  else
    log << "\n" << set << " set: " << ev.samples << " samples, accuracy " << fmt(100 * ev.accuracy, 2) << "%, loss "
        << fmt(ev.loss) << "\n";
  if (ev.confusion.num_classes() > 0) log << ev.confusion.format(o.class_names);
  const double rate = result.samples_per_s, single = result.single_samples_per_s;
  log << "throughput: " << static_cast<int64_t>(rate) << " samples/s (median over steps) on " << world << " replica(s)";
  if (single > 0)
    log << "; 1 replica: " << static_cast<int64_t>(single) << " samples/s; speed-up " << fmt(rate / single, 2) << "x ("
        << fmt(100 * rate / single / world, 0) << "% efficiency)";
  log << "\n";
  const double peak_mb = peak_resident_mb();
  log << "peak resident memory: " << static_cast<int64_t>(peak_mb) << " MiB\n";
  const auto overlap = summarize_overlap(result.steps);
  if (overlap)
    log << "per step: " << fmt(overlap->step_ms, 2) << " ms, compute " << fmt(overlap->compute_ms, 2)
        << " ms, communication " << fmt(overlap->comm_ms, 2) << " ms, exposed communication "
        << fmt(overlap->exposed_comm_ms, 2) << " ms\n";
  if (metrics) {
    const std::string metrics_path = metrics->path();
    std::vector<std::pair<std::string, double>> extra = {{"samples_per_s", rate}, {"peak_rss_mb", peak_mb}};
    if (!regression) extra.push_back({"final_accuracy", ev.accuracy});
    if (!regression) extra.push_back({"final_loss", ev.loss});
    if (ev.tokens) extra.push_back({"final_perplexity", ev.perplexity});
    if (ev.tokens) extra.push_back({"positions", static_cast<double>(ev.positions)});
    if (single > 0) extra.push_back({"single_samples_per_s", single});
    write_metrics([&](MetricsWriter& m) {
      if (regression)
        m.write_regression_summary(ev.samples, loss_kind_name(loss), ev.loss, ev.mse, ev.mae, extra);
      else
        m.write_summary(ev.confusion, o.class_names, extra);
    });
    if (metrics) late.written(metrics_path);
  }
  if (o.report_path.empty()) return;
  ReportData rd;
  rd.title = "onnx-mirror training run";
  rd.model = model->source_path;
  rd.command_line = o.command_line;
  rd.replicas = trainer.local_replicas();
  rd.world_size = world;
  rd.epochs = result.epochs;
  rd.steps = result.steps;
  rd.confusion = ev.confusion;
  rd.class_names = o.class_names;
  rd.confusion_title = val ? "validation set" : "training set";
  rd.overlap = overlap;
  if (single > 0) rd.speedup = SpeedupSummary{world, rate, single};
  if (late.attempt([&] { write_report(o.report_path, rd); })) {
    late.written(o.report_path);
    log << "wrote " << o.report_path << "\n";
  }
}

}  // namespace omt
