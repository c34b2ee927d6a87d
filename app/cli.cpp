// The `lockstep` command line (see cli.h): CLI11 definitions, value checks with our own wording,
// and the translation of CLI11's errors into one `lockstep: error: ...` line.
#include "cli.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <iostream>
#include <limits>
#include <system_error>

namespace lockstep::app {
namespace {

#ifndef LOCKSTEP_VERSION
#error "LOCKSTEP_VERSION must be defined by the build (CMake project version)"
#endif

/// "'abc'" — the value as the user typed it, quoted.
std::string single_quoted(const std::string& s) { return "'" + s + "'"; }

/// Parses all of `text` as a T with std::from_chars (decimal, no sign for unsigned, no
/// leading '+' or spaces); false when any character is left over or the value overflows.
template <class T>
bool parse_all(const std::string& text, T& value) {
  const char* first = text.data();
  const char* last = first + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  return ec == std::errc() && ptr == last && !text.empty();
}

/// A signed 64-bit integer >= `min`.
CLI::Validator integer_at_least(std::int64_t min) {
  const std::string want = "an integer >= " + std::to_string(min);
  return CLI::Validator(
      [min, want](std::string& text) -> std::string {
        std::int64_t v = 0;
        if (!parse_all(text, v) || v < min) return "expected " + want + ", got " + single_quoted(text);
        return "";
      },
      "", "INT>=" + std::to_string(min));
}

/// An unsigned 64-bit integer (a seed).
CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::uint64_t v = 0;
        if (!parse_all(text, v))
          return "expected an integer in [0, 2^64 - 1], got " + single_quoted(text);
        return "";
      },
      "", "UINT64");
}

/// A finite floating-point number >= 0.
CLI::Validator finite_non_negative() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0.0;
        if (!parse_all(text, v) || !std::isfinite(v) || v < 0.0)
          return "expected a finite number >= 0, got " + single_quoted(text);
        return "";
      },
      "", "FLOAT>=0");
}

/// `value` as printf's "%g" writes it: 0.01, 1e-05.
std::string shortest(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", value);
  return buf;
}

/// The part of `text` after the first occurrence of `marker`, or "" when it does not occur.
std::string after(const std::string& text, const std::string& marker) {
  auto pos = text.find(marker);
  return pos == std::string::npos ? std::string() : text.substr(pos + marker.size());
}

/// Adds the `train` subcommand and its flags, writing into `config`.
void add_train_command(CLI::App& app, CliOptions& options) {
  CLI::App* train = app.add_subcommand(
      "train", "Train a model, printing the validation loss after every epoch");
  TrainConfig& c = options.train;
  const TrainConfig d;
  train->add_option("--epochs", c.epochs,
                    "Passes over the training rows; integer >= 1 (default: " +
                        std::to_string(d.epochs) + ")")
      ->check(integer_at_least(1));
  train->add_option("--batch-size", c.batch_size,
                    "Training rows per SGD step, last batch may be smaller; integer >= 1 "
                    "(default: " + std::to_string(d.batch_size) + ")")
      ->check(integer_at_least(1));
  train->add_option("--lr", c.lr,
                    "SGD learning rate; finite number >= 0 (default: " + shortest(d.lr) + ")")
      ->check(finite_non_negative());
  train->add_option("--seed", c.seed,
                    "Seed of the default generator, which draws the data and then the initial "
                    "parameters; integer in [0, 2^64) (default: " + std::to_string(d.seed) + ")")
      ->check(unsigned_integer());
  train->add_option_function<std::string>(
            "--devices",
            [&c](const std::string& list) {
              c.devices = parallel::parse_devices(list);
              for (const Device& d : c.devices) check_device_available(d);
            },
            "Comma-separated devices to replicate the model on, e.g. cpu:0,cpu:1,cpu:2 (cpu:k is "
            "a logical CPU worker, any k >= 0) (default: every GPU if any, otherwise one CPU "
            "device per usable core: " +
                std::to_string(usable_cores()) + " here)")
      ->type_name("LIST");
  train->add_flag("--deterministic", c.deterministic,
                  "Bit-identical weights for any number of devices: per-shard gradients summed "
                  "in a fixed tree (slower) (default: off)");
  for (CLI::Option* opt : train->get_options())
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  train->footer(
      "Workload (today the only one): the reference program - 1000x10 standard-normal features "
      "and labels in {0, 1} drawn after manual_seed(seed), the first 800 rows train and the "
      "last 200 validate; model Sequential(Linear(10,5), ReLU, Linear(5,2)) wrapped in "
      "DataParallel over --devices; CrossEntropyLoss; SGD; batches in row order.\n"
      "Output: one line `Epoch k, Validation Loss: x.xxxx` per epoch on stdout.\n"
      "Exit status: 0 success, 1 training failed, 2 bad command line (one line "
      "'lockstep: error: ...' on stderr).");
  train->callback([&options] { options.command = Command::Train; });
}

}  // namespace

std::string version_text() {
  return std::string("lockstep ") + LOCKSTEP_VERSION + "\nbackends: cpu (threads)";
}

std::unique_ptr<CLI::App> make_cli(CliOptions& options) {
  auto app = std::make_unique<CLI::App>(
      "Lockstep: data-parallel neural-network training in C++ (PyTorch semantics).", "lockstep");
  app->set_version_flag("--version", version_text(), "Print the version and the backends built");
  app->require_subcommand(1);
  app->footer(
      "Run 'lockstep <command> --help' for a command's flags. Errors print one line "
      "'lockstep: error: ...' on stderr. Exit status: 0 success, 1 the job failed, "
      "2 bad command line.");
  add_train_command(*app, options);
  return app;
}

std::string help_command_for(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands({}))
    if (sub->parsed()) return app.get_name() + " " + sub->get_name() + " --help";
  return app.get_name() + " --help";
}

std::string describe_parse_error(const CLI::ParseError& error, const CLI::App& app) {
  const std::string what = error.what();
  std::string message;
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    // CLI11's own message lists the arguments in reverse order; ask the app instead.
    std::vector<std::string> extras = app.remaining(true);
    std::string args;
    for (const std::string& arg : extras) args += (args.empty() ? "" : " ") + arg;
    if (args.empty()) args = after(what, "expected: ");
    message = std::string("unrecognized argument") + (extras.size() > 1 ? "s " : " ") +
              single_quoted(args);
  } else if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr &&
             what.rfind("A subcommand", 0) == 0) {
    std::vector<std::string> rest = app.remaining();
    message = rest.empty() ? "missing command: expected 'train'"
                           : "unknown command " + single_quoted(rest.front()) +
                                 ": expected 'train'";
  } else if (dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr &&
             what.find("missing") != std::string::npos) {
    message = what.substr(0, what.find(':')) + ": expected a value";
  } else if (dynamic_cast<const CLI::ConversionError*>(&error) != nullptr) {
    std::string rest = after(what, "Could not convert: ");
    message = "invalid value " + (rest.empty() ? what : rest);
  } else {
    message = what;  // validators already speak our language: "--lr: expected ..., got '-1'"
  }
  if (!message.empty())
    message[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(message[0])));
  return message + " (see '" + help_command_for(app) + "')";
}

void print_error(const std::string& message) {
  std::string line = message;
  for (char& ch : line)
    if (ch == '\n' || ch == '\r') ch = ' ';
  std::cerr << "lockstep: error: " << line << std::endl;
}

}  // namespace lockstep::app
