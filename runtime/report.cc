// The HTML report: every chart is SVG text generated here, so the page opens offline and
// carries no script. Each section is left out when its data is missing.
#include "runtime/report.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <sstream>

#include "common/file_util.h"

namespace omt {

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::optional<OverlapSummary> summarize_overlap(const std::vector<StepStats>& steps) {
  double sums[4] = {0, 0, 0, 0};
  int64_t counts[4] = {0, 0, 0, 0};
  int64_t with_any = 0;
  for (const StepStats& s : steps) {
    const std::optional<double> values[4] = {
        std::optional<double>(s.seconds * 1e3), s.compute_ms, s.comm_ms, s.exposed_comm_ms};
    if (!s.compute_ms && !s.comm_ms && !s.exposed_comm_ms) continue;
    ++with_any;
    for (int k = 0; k < 4; ++k) {
      if (values[k] && std::isfinite(*values[k])) {
        sums[k] += *values[k];
        ++counts[k];
      }
    }
  }
  if (with_any == 0) return std::nullopt;
  auto mean = [&](int k) { return counts[k] ? sums[k] / static_cast<double>(counts[k]) : kNoValue; };
  OverlapSummary o;
  o.steps = with_any;
  o.step_ms = mean(0);
  o.compute_ms = mean(1);
  o.comm_ms = mean(2);
  o.exposed_comm_ms = mean(3);
  return o;
}

namespace {

// ---------------------------------------------------------------- number formatting

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "&ndash;";
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(decimals);
  os << v;
  return os.str();
}

std::string percent(double fraction, int decimals = 2) {
  if (!std::isfinite(fraction)) return "&ndash;";
  return fixed(100.0 * fraction, decimals) + "%";
}

// Regression losses and errors span decades: 4 significant digits.
std::string significant(double v) {
  if (!std::isfinite(v)) return "&ndash;";
  std::ostringstream os;
  os.precision(4);
  os << v;
  return os.str();
}

std::string rate(double v) { return std::isfinite(v) ? format_thousands(v) : "&ndash;"; }

// ---------------------------------------------------------------- line charts

struct Series {
  std::string name;
  std::string colour;
  std::vector<std::pair<double, double>> points;  // NaN y: a gap in the line
  bool dashed = false;
};

// Note [Nice ticks]: axis steps are 1, 2 or 5 times a power of ten, about `target` of them
// over the range, and the axis is widened to whole steps so the end ticks sit on the frame.
double nice_step(double range, int target) {
  if (!(range > 0)) return 1.0;
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double m = raw / mag;
  return (m <= 1.0 ? 1.0 : m <= 2.0 ? 2.0 : m <= 5.0 ? 5.0 : 10.0) * mag;
}

std::string tick_label(double v, double step) {
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  if (std::fabs(v) < step * 1e-6) v = 0.0;  // no "-0.0"
  if (decimals == 0 && std::fabs(v) >= 10000) return format_thousands(v);
  return fixed(v, decimals);
}

std::string line_chart(const std::string& title, const std::string& x_label,
                       const std::string& y_label, const std::vector<Series>& series,
                       bool integer_x) {
  const double W = 640, H = 300, L = 72, R = 16, T = 34, B = 50;
  const double pw = W - L - R, ph = H - T - B;
  std::ostringstream os;
  os << "<svg class=\"chart\" viewBox=\"0 0 " << W << " " << H << "\" width=\"" << W
     << "\" height=\"" << H << "\" role=\"img\" aria-label=\"" << html_escape(title) << "\">\n";
  os << "<text x=\"" << L << "\" y=\"" << T - 8 << "\" class=\"title\">" << html_escape(title)
     << "</text>\n";

  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) {
        xmin = std::min(xmin, x), xmax = std::max(xmax, x);
        ymin = std::min(ymin, y), ymax = std::max(ymax, y);
      }
  if (!std::isfinite(xmin)) {
    os << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << pw << "\" height=\"" << ph
       << "\" class=\"frame\"/>\n<text x=\"" << L + pw / 2 << "\" y=\"" << T + ph / 2
       << "\" class=\"nodata\">no data</text>\n</svg>\n";
    return os.str();
  }
  if (xmax == xmin) xmin -= 1, xmax += 1;
  if (ymax == ymin) {
    const double pad = std::fabs(ymin) > 0 ? std::fabs(ymin) * 0.1 : 1.0;
    ymin -= pad, ymax += pad;
  }
  // A little headroom so the highest point does not sit on the frame.
  // Values that are all >= 0 keep a floor of 0 rather than going negative.
  const double headroom = 0.04 * (ymax - ymin);
  ymin = (ymin >= 0 && ymin - headroom < 0) ? 0.0 : ymin - headroom;
  ymax += headroom;
  double ystep = nice_step(ymax - ymin, 5);
  ymin = std::floor(ymin / ystep + 1e-9) * ystep;
  ymax = std::ceil(ymax / ystep - 1e-9) * ystep;
  double xstep = nice_step(xmax - xmin, 8);
  if (integer_x) xstep = std::max(1.0, std::round(xstep));
  auto px = [&](double x) { return L + (x - xmin) / (xmax - xmin) * pw; };
  auto py = [&](double y) { return T + ph - (y - ymin) / (ymax - ymin) * ph; };

  // Grid, ticks and tick labels.
  for (double y = ymin; y <= ymax + ystep * 1e-6; y += ystep) {
    os << "<line x1=\"" << L << "\" x2=\"" << L + pw << "\" y1=\"" << py(y) << "\" y2=\"" << py(y)
       << "\" class=\"grid\"/><text x=\"" << L - 6 << "\" y=\"" << py(y) + 4
       << "\" class=\"ytick\">" << tick_label(y, ystep) << "</text>\n";
  }
  for (double x = std::ceil(xmin / xstep - 1e-9) * xstep; x <= xmax + xstep * 1e-6; x += xstep) {
    os << "<line x1=\"" << px(x) << "\" x2=\"" << px(x) << "\" y1=\"" << T + ph << "\" y2=\""
       << T + ph + 5 << "\" class=\"axis\"/><text x=\"" << px(x) << "\" y=\"" << T + ph + 18
       << "\" class=\"xtick\">" << tick_label(x, xstep) << "</text>\n";
  }
  os << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << pw << "\" height=\"" << ph
     << "\" class=\"frame\"/>\n";
  os << "<text x=\"" << L + pw / 2 << "\" y=\"" << H - 10 << "\" class=\"label\">"
     << html_escape(x_label) << "</text>\n";
  os << "<text transform=\"translate(16," << T + ph / 2 << ") rotate(-90)\" class=\"label\">"
     << html_escape(y_label) << "</text>\n";

  // Lines (broken at missing values) and markers where there are few enough points.
  for (const Series& s : series) {
    std::string path;
    bool pen_down = false;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) {
        pen_down = false;
        continue;
      }
      std::ostringstream p;
      p << (pen_down ? " L" : " M") << px(x) << "," << py(y);
      path += p.str();
      pen_down = true;
    }
    os << "<path d=\"" << path << "\" fill=\"none\" stroke=\"" << s.colour
       << "\" stroke-width=\"2\"" << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/>\n";
    if (s.points.size() <= 60 && !s.dashed)
      for (const auto& [x, y] : s.points)
        if (std::isfinite(x) && std::isfinite(y))
          os << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"3\" fill=\"" << s.colour
             << "\"><title>" << html_escape(s.name) << ": " << tick_label(x, integer_x ? 1 : 0.001)
             << ", " << fixed(y, 4) << "</title></circle>\n";
  }

  // Legend in the title row, right-aligned, so it never covers the data.
  double lx = L + pw;
  for (size_t i = series.size(); i-- > 0;) {
    lx -= 34 + 6.5 * static_cast<double>(series[i].name.size()) + 12;
    os << "<line x1=\"" << lx << "\" x2=\"" << lx + 24 << "\" y1=\"" << T - 12 << "\" y2=\""
       << T - 12 << "\" stroke=\"" << series[i].colour << "\" stroke-width=\"2\""
       << (series[i].dashed ? " stroke-dasharray=\"6 4\"" : "") << "/><text x=\"" << lx + 30
       << "\" y=\"" << T - 8 << "\" class=\"legendtext\">" << html_escape(series[i].name) << "</text>\n";
  }
  os << "</svg>\n";
  return os.str();
}

// ---------------------------------------------------------------- confusion heat map

// Blues: from near-white to dark blue by the fraction of the true class in the cell.
std::string blue(double t) {
  t = std::clamp(t, 0.0, 1.0);
  const int r = static_cast<int>(std::lround(247 + (8 - 247) * t));
  const int g = static_cast<int>(std::lround(251 + (48 - 251) * t));
  const int b = static_cast<int>(std::lround(255 + (107 - 255) * t));
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

std::string heat_map(const ConfusionMatrix& cm, const std::vector<std::string>& names) {
  const int64_t c = cm.num_classes();
  const double cell = std::clamp(440.0 / static_cast<double>(c), 12.0, 48.0);
  size_t longest = 1;
  for (int64_t i = 0; i < c; ++i) longest = std::max(longest, class_name(names, i).size());
  const double label_w = 7.0 * static_cast<double>(std::min<size_t>(longest, 24)) + 16;
  const double L = label_w + 28, T = label_w * 0.72 + 30;  // column labels run at -45 degrees
  const double grid = cell * static_cast<double>(c);
  const double W = L + grid + 90, H = T + grid + 16;
  const bool show_counts = cell >= 18;
  const double font = std::min(12.0, cell * 0.34);

  std::ostringstream os;
  os << "<svg class=\"heatmap\" viewBox=\"0 0 " << W << " " << H << "\" width=\"" << W
     << "\" height=\"" << H << "\" role=\"img\" aria-label=\"confusion matrix\">\n";
  os << "<defs><linearGradient id=\"omt-blues\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">"
     << "<stop offset=\"0\" stop-color=\"" << blue(0) << "\"/><stop offset=\"1\" stop-color=\""
     << blue(1) << "\"/></linearGradient></defs>\n";
  os << "<text x=\"" << L + grid / 2 << "\" y=\"14\" class=\"label\">predicted class</text>\n";
  os << "<text transform=\"translate(14," << T + grid / 2 << ") rotate(-90)\" class=\"label\">"
     << "true class</text>\n";
  for (int64_t i = 0; i < c; ++i) {
    const std::string name = html_escape(class_name(names, i));
    const double centre = static_cast<double>(i) * cell + cell / 2;
    os << "<text x=\"" << L - 6 << "\" y=\"" << T + centre + 4 << "\" class=\"rowlabel\">" << name
       << "</text>\n";
    os << "<text transform=\"translate(" << L + centre + 4 << "," << T - 6
       << ") rotate(-45)\" class=\"collabel\">" << name << "</text>\n";
  }
  for (int64_t i = 0; i < c; ++i) {
    const int64_t row_total = cm.support(i);
    for (int64_t j = 0; j < c; ++j) {
      const int64_t n = cm.counts(i, j);
      const double frac = row_total > 0 ? static_cast<double>(n) / static_cast<double>(row_total) : 0.0;
      const double x = L + static_cast<double>(j) * cell, y = T + static_cast<double>(i) * cell;
      os << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << cell << "\" height=\"" << cell
         << "\" fill=\"" << blue(frac) << "\" class=\"cell\"><title>true "
         << html_escape(class_name(names, i)) << ", predicted " << html_escape(class_name(names, j))
         << ": " << n << " (" << percent(frac, 1) << " of the class)</title></rect>\n";
      if (show_counts && n > 0)
        os << "<text x=\"" << x + cell / 2 << "\" y=\"" << y + cell / 2 + font * 0.35
           << "\" class=\"count\" style=\"font-size:" << font << "px;fill:"
           << (frac > 0.5 ? "#ffffff" : "#1a1a1a") << "\">" << n << "</text>\n";
    }
  }
  // Colour scale: fraction of each true class (row), 0 to 100%.
  const double sx = L + grid + 24;
  os << "<rect x=\"" << sx << "\" y=\"" << T << "\" width=\"14\" height=\"" << grid
     << "\" fill=\"url(#omt-blues)\" class=\"cell\"/>\n";
  for (int k = 0; k <= 4; ++k) {
    const double y = T + grid - grid * k / 4.0;
    os << "<text x=\"" << sx + 20 << "\" y=\"" << y + 4 << "\" class=\"scale\">" << k * 25
       << "%</text>\n";
  }
  os << "</svg>\n";
  return os.str();
}

// ---------------------------------------------------------------- overlap bars

// One stacked bar per row: compute, then the communication compute did not hide.
std::string overlap_bars(const std::vector<std::pair<std::string, OverlapSummary>>& rows) {
  double longest = 0;
  for (const auto& [name, o] : rows) {
    const double total = (std::isfinite(o.compute_ms) ? o.compute_ms : 0) +
                         (std::isfinite(o.exposed_comm_ms) ? o.exposed_comm_ms : 0);
    longest = std::max({longest, total, std::isfinite(o.step_ms) ? o.step_ms : 0.0});
  }
  if (!(longest > 0)) return "";
  const double W = 640, L = 120, R = 70, bar = 22, gap = 12;
  const double H = 40 + static_cast<double>(rows.size()) * (bar + gap);
  const double scale = (W - L - R) / longest;
  std::ostringstream os;
  os << "<svg class=\"bars\" viewBox=\"0 0 " << W << " " << H << "\" width=\"" << W
     << "\" height=\"" << H << "\" role=\"img\" aria-label=\"time per step\">\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& [name, o] = rows[i];
    const double y = 8 + static_cast<double>(i) * (bar + gap);
    const double compute = std::isfinite(o.compute_ms) ? o.compute_ms : 0;
    const double exposed = std::isfinite(o.exposed_comm_ms) ? o.exposed_comm_ms : 0;
    os << "<text x=\"" << L - 8 << "\" y=\"" << y + bar * 0.7 << "\" class=\"rowlabel\">"
       << html_escape(name) << "</text>\n";
    os << "<rect x=\"" << L << "\" y=\"" << y << "\" width=\"" << compute * scale
       << "\" height=\"" << bar << "\" fill=\"#3b75af\"><title>compute " << fixed(compute, 2)
       << " ms</title></rect>\n";
    os << "<rect x=\"" << L + compute * scale << "\" y=\"" << y << "\" width=\"" << exposed * scale
       << "\" height=\"" << bar << "\" fill=\"#ef8636\"><title>exposed communication "
       << fixed(exposed, 2) << " ms</title></rect>\n";
    os << "<text x=\"" << L + (compute + exposed) * scale + 6 << "\" y=\"" << y + bar * 0.7
       << "\" class=\"legendtext\">" << fixed(compute + exposed, 2) << " ms</text>\n";
  }
  const double ly = H - 14;
  os << "<rect x=\"" << L << "\" y=\"" << ly - 10 << "\" width=\"12\" height=\"12\" fill=\"#3b75af\"/>"
     << "<text x=\"" << L + 18 << "\" y=\"" << ly << "\" class=\"legendtext\">compute</text>"
     << "<rect x=\"" << L + 100 << "\" y=\"" << ly - 10
     << "\" width=\"12\" height=\"12\" fill=\"#ef8636\"/><text x=\"" << L + 118 << "\" y=\"" << ly
     << "\" class=\"legendtext\">exposed communication</text>\n</svg>\n";
  return os.str();
}

// ---------------------------------------------------------------- page

const char* kCss = R"(
body{font-family:-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:24px auto;
  max-width:1320px;padding:0 16px;color:#1a1a1a;background:#fff}
h1{font-size:24px;margin:0 0 12px}h2{font-size:18px;margin:28px 0 10px;border-bottom:1px solid #ddd;
  padding-bottom:4px}
table{border-collapse:collapse;font-size:13px;margin:4px 0}
th,td{padding:4px 10px;border-bottom:1px solid #e6e6e6;text-align:right}
th{background:#f4f6f8;font-weight:600}td.l,th.l{text-align:left}
table.info td{text-align:left;border:none;padding:2px 12px 2px 0}table.info td.k{color:#666}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;background:#f4f6f8;
  padding:1px 4px;border-radius:3px;word-break:break-all}
.cards{display:flex;flex-wrap:wrap;gap:12px}.card{border:1px solid #ddd;border-radius:6px;
  padding:8px 14px;min-width:130px}.card .v{font-size:20px;font-weight:600}.card .k{color:#666;font-size:12px}
.charts{display:flex;flex-wrap:wrap;gap:16px}
svg text{font-size:11px;fill:#333}svg .title{font-size:14px;font-weight:600;text-anchor:start}
svg .label{font-size:12px;text-anchor:middle}svg .ytick,svg .rowlabel{text-anchor:end}
svg .xtick{text-anchor:middle}svg .collabel{text-anchor:start}svg .count{text-anchor:middle}
svg .nodata{text-anchor:middle;fill:#999}
svg .grid{stroke:#e8e8e8}svg .axis{stroke:#555}svg .frame{fill:none;stroke:#555}
svg .cell{stroke:#fff;stroke-width:1}
.note{color:#666;font-size:12px}
)";

void info_row(std::ostringstream& os, const std::string& key, const std::string& value_html) {
  os << "<tr><td class=\"k\">" << html_escape(key) << "</td><td>" << value_html << "</td></tr>\n";
}

std::string now_string() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %z", &tm);
  return buf;
}

void card(std::ostringstream& os, const std::string& key, const std::string& value_html) {
  os << "<div class=\"card\"><div class=\"v\">" << value_html << "</div><div class=\"k\">"
     << html_escape(key) << "</div></div>\n";
}

}  // namespace

std::string render_report(const ReportData& d) {
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
     << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>"
     << html_escape(d.title) << "</title>\n<style>" << kCss << "</style>\n</head>\n<body>\n";
  os << "<h1>" << html_escape(d.title) << "</h1>\n";

  // Header.
  os << "<table class=\"info\">\n";
  info_row(os, "model", "<code>" + html_escape(d.model) + "</code>");
  if (!d.command_line.empty()) info_row(os, "command", "<code>" + html_escape(d.command_line) + "</code>");
  info_row(os, "replicas", std::to_string(d.replicas));
  info_row(os, "world size", std::to_string(d.world_size));
  info_row(os, "date", html_escape(d.date.empty() ? now_string() : d.date));
  for (const auto& [key, value] : d.info) info_row(os, key, html_escape(value));
  os << "</table>\n";

  // Headline numbers.
  if (!d.epochs.empty() || d.speedup) {
    os << "<h2>Summary</h2>\n<div class=\"cards\">\n";
    if (!d.epochs.empty()) {
      const EpochStats& last = d.epochs.back();
      double seconds = 0, samples = 0;
      for (const EpochStats& e : d.epochs) seconds += e.seconds, samples += static_cast<double>(e.samples);
      card(os, "epochs", std::to_string(d.epochs.size()));
      card(os, "final training loss", fixed(last.train_loss, 4));
      if (std::isfinite(last.val_accuracy)) card(os, "final validation accuracy", percent(last.val_accuracy));
      if (std::isfinite(last.val_loss)) card(os, "final validation loss", fixed(last.val_loss, 4));
      if (std::isfinite(last.val_perplexity)) card(os, "final validation perplexity", fixed(last.val_perplexity, 3));
      else if (std::isfinite(last.train_perplexity)) card(os, "final training perplexity", fixed(last.train_perplexity, 3));
      if (std::isfinite(last.val_mae)) card(os, "final validation MAE", significant(last.val_mae));
      card(os, "training time", html_escape(format_duration(seconds)));
      card(os, "mean samples/s", rate(seconds > 0 ? samples / seconds : kNoValue));
    }
    if (d.speedup) card(os, "speed-up vs 1 replica", fixed(d.speedup->speedup(), 2) + "&times;");
    os << "</div>\n";
  }

  // Per-epoch table and curves.
  if (!d.epochs.empty()) {
    // A regression (float targets) shows mean absolute errors where a classifier shows accuracy.
    const bool regression = d.epochs.front().regression;
    auto metric = [&](double accuracy, double mae) { return regression ? significant(mae) : percent(accuracy); };
    auto loss_text = [&](double v) { return regression ? significant(v) : fixed(v, 4); };
    const char* metric_name = regression ? "MAE" : "acc.";
    os << "<h2>Epochs</h2>\n<table>\n<tr><th>epoch</th><th>steps</th><th>samples</th>"
       << "<th>time (s)</th><th>train loss</th><th>train " << metric_name << "</th><th>val loss</th>"
       << "<th>val " << metric_name << "</th><th>samples/s</th><th>steps/s</th><th>lr</th></tr>\n";
    for (const EpochStats& e : d.epochs) {
      os << "<tr><td>" << e.epoch << "</td><td>" << e.steps << "</td><td>"
         << format_thousands(static_cast<double>(e.samples)) << "</td><td>" << fixed(e.seconds, 2)
         << "</td><td>" << loss_text(e.train_loss) << "</td><td>" << metric(e.train_accuracy, e.train_mae)
         << "</td><td>" << loss_text(e.val_loss) << "</td><td>" << metric(e.val_accuracy, e.val_mae)
         << "</td><td>" << rate(e.samples_per_s) << "</td><td>" << fixed(e.steps_per_s, 2)
         << "</td><td>" << (std::isfinite(e.lr) ? fixed(e.lr, 6) : "&ndash;") << "</td></tr>\n";
    }
    os << "</table>\n";

    Series train_loss{"training", "#3b75af", {}}, val_loss{"validation", "#ef8636", {}};
    Series train_acc{"training", "#3b75af", {}}, val_acc{"validation", "#ef8636", {}};
    Series tput{std::to_string(d.replicas) + (d.replicas == 1 ? " replica" : " replicas"), "#519e3e", {}};
    bool any_val_loss = false, any_train_acc = false, any_val_acc = false;
    for (const EpochStats& e : d.epochs) {
      const double x = static_cast<double>(e.epoch);
      train_loss.points.push_back({x, e.train_loss});
      val_loss.points.push_back({x, e.val_loss});
      const double train_metric = regression ? e.train_mae : 100 * e.train_accuracy;
      const double val_metric = regression ? e.val_mae : 100 * e.val_accuracy;
      train_acc.points.push_back({x, train_metric});
      val_acc.points.push_back({x, val_metric});
      tput.points.push_back({x, e.samples_per_s});
      any_val_loss |= std::isfinite(e.val_loss);
      any_train_acc |= std::isfinite(train_metric);
      any_val_acc |= std::isfinite(val_metric);
    }
    std::vector<Series> loss{train_loss}, acc, throughput{tput};
    if (any_val_loss) loss.push_back(val_loss);
    if (any_train_acc) acc.push_back(train_acc);
    if (any_val_acc) acc.push_back(val_acc);
    if (d.speedup && std::isfinite(d.speedup->single_samples_per_s)) {
      Series single{"1 replica", "#888888", {}, true};
      for (const EpochStats& e : d.epochs)
        single.points.push_back({static_cast<double>(e.epoch), d.speedup->single_samples_per_s});
      throughput.push_back(single);
    }
    os << "<h2>Curves</h2>\n<div class=\"charts\">\n";
    os << line_chart("Loss per epoch", "epoch", "loss", loss, true);
    if (regression)
      os << line_chart("Mean absolute error per epoch", "epoch", "MAE", acc, true);
    else
      os << line_chart("Accuracy per epoch", "epoch", "accuracy (%)", acc, true);
    os << line_chart("Throughput per epoch", "epoch", "samples/s", throughput, true);
    if (!d.steps.empty()) {
      Series step_loss{"training (per step)", "#3b75af", {}};
      const size_t stride = (d.steps.size() + 999) / 1000;
      for (size_t i = 0; i < d.steps.size(); i += stride)
        step_loss.points.push_back({static_cast<double>(d.steps[i].step), d.steps[i].loss});
      os << line_chart("Loss per step", "step", "loss", {step_loss}, true);
    }
    os << "</div>\n";
  }

  // Confusion matrix and per-class metrics.
  const ConfusionMatrix& cm = d.confusion;
  if (cm.num_classes() > 0) {
    os << "<h2>Confusion matrix (" << html_escape(d.confusion_title) << ", "
       << format_thousands(static_cast<double>(cm.total())) << " samples, accuracy "
       << percent(cm.accuracy()) << ")</h2>\n";
    os << "<p class=\"note\">Rows are the true class, columns the predicted class; the colour is "
       << "the fraction of the true class, the number the count.</p>\n";
    os << heat_map(cm, d.class_names);
    os << "<h2>Per-class metrics</h2>\n<table>\n<tr><th class=\"l\">class</th><th>precision</th>"
       << "<th>recall</th><th>F1</th><th>support</th></tr>\n";
    for (int64_t c = 0; c < cm.num_classes(); ++c)
      os << "<tr><td class=\"l\">" << html_escape(class_name(d.class_names, c)) << "</td><td>"
         << fixed(cm.precision(c), 4) << "</td><td>" << fixed(cm.recall(c), 4) << "</td><td>"
         << fixed(cm.f1(c), 4) << "</td><td>" << cm.support(c) << "</td></tr>\n";
    os << "<tr><th class=\"l\">macro avg</th><th>" << fixed(cm.macro_precision(), 4) << "</th><th>"
       << fixed(cm.macro_recall(), 4) << "</th><th>" << fixed(cm.macro_f1(), 4) << "</th><th>"
       << cm.total() << "</th></tr>\n";
    os << "<tr><th class=\"l\">weighted avg</th><th>" << fixed(cm.weighted_precision(), 4)
       << "</th><th>" << fixed(cm.weighted_recall(), 4) << "</th><th>" << fixed(cm.weighted_f1(), 4)
       << "</th><th>" << cm.total() << "</th></tr>\n</table>\n";
  }

  // Speed-up against one replica.
  if (d.speedup) {
    const SpeedupSummary& s = *d.speedup;
    os << "<h2>Speed-up</h2>\n<table>\n<tr><th class=\"l\">run</th><th>samples/s</th>"
       << "<th>speed-up</th><th>efficiency</th></tr>\n";
    os << "<tr><td class=\"l\">1 replica</td><td>" << rate(s.single_samples_per_s)
       << "</td><td>1.00&times;</td><td>100%</td></tr>\n";
    os << "<tr><td class=\"l\">" << s.replicas << (s.replicas == 1 ? " replica" : " replicas")
       << "</td><td>" << rate(s.samples_per_s) << "</td><td>" << fixed(s.speedup(), 2)
       << "&times;</td><td>" << percent(s.efficiency(), 0) << "</td></tr>\n</table>\n";
  }

  // Overlap of gradient communication with compute.
  if (d.overlap || d.no_overlap) {
    std::vector<std::pair<std::string, OverlapSummary>> rows;
    if (d.no_overlap) rows.push_back({"without overlap", *d.no_overlap});
    if (d.overlap) rows.push_back({"with overlap", *d.overlap});
    os << "<h2>Overlap</h2>\n<p class=\"note\">Mean per step, in milliseconds. Exposed "
       << "communication is the part of the gradient reduction that compute did not hide.</p>\n"
       << "<table>\n<tr><th class=\"l\">run</th><th>steps</th><th>step</th><th>compute</th>"
       << "<th>communication</th><th>exposed communication</th><th>hidden</th></tr>\n";
    for (const auto& [name, o] : rows) {
      const double hidden = (std::isfinite(o.comm_ms) && o.comm_ms > 0 && std::isfinite(o.exposed_comm_ms))
                                ? 1.0 - o.exposed_comm_ms / o.comm_ms
                                : kNoValue;
      os << "<tr><td class=\"l\">" << html_escape(name) << "</td><td>" << o.steps << "</td><td>"
         << fixed(o.step_ms, 2) << "</td><td>" << fixed(o.compute_ms, 2) << "</td><td>"
         << fixed(o.comm_ms, 2) << "</td><td>" << fixed(o.exposed_comm_ms, 2) << "</td><td>"
         << percent(hidden, 0) << "</td></tr>\n";
    }
    os << "</table>\n" << overlap_bars(rows);
  }

  os << "<p class=\"note\">Written by onnx-mirror-train.</p>\n</body>\n</html>\n";
  return os.str();
}

void write_report(const std::string& path, const ReportData& data) {
  const std::string page = render_report(data);
  try {
    write_file_atomic(path, page);
  } catch (const Error& e) {
    OMT_FAIL(kIo, "cannot write the HTML report (--report): ", e.what());
  }
}

}  // namespace omt
