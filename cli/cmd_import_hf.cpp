// `strata import-hf CONFIG.json [-o model.json] [--name N] [--seq-len S]`: turn a Hugging Face
// config.json into a Strata model file (canonical JSON, docs/formats.md). Bad input exits 2 and
// writes nothing; the output file is written atomically.
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::cli {

namespace {

struct ImportHfArgs {
    std::string config;
    std::string output = "-";
    std::string name;
    std::int64_t seq_len = 0;
    bool windows_as_full = false;
};

void run_import_hf(const ImportHfArgs& a) {
    check_outputs({{"--output", a.output}});
    sim::HfImportOptions options;
    options.seq_len = a.seq_len;  // decided before the import: a sliding window is checked against it
    options.windows_as_full = a.windows_as_full;
    sim::ModelSpec m = sim::model_from_hf_config_text(read_text_file(a.config), a.config, options);
    if (!a.name.empty()) m.name = a.name;
    // Re-read what will be written, so overrides obey the same rules (e.g. a learned position
    // table at least seq_len long) and the file is known to load.
    const std::string text = sim::to_json_text(m);
    sim::model_from_json_text(text, a.output == "-" ? a.config : a.output);
    write_output(a.output, text);
    if (a.output != "-")
        std::cout << "wrote " << a.output << ": " << m.name << ", " << m.layers << " layers, hidden " << m.hidden << ", "
                  << m.heads << " heads (" << m.kv_heads << " KV), seq_len " << m.seq_len
                  << (m.is_moe() ? ", " + std::to_string(m.moe->experts) + " experts top-" + std::to_string(m.moe->top_k) : "")
                  << "\n";
}

void register_import_hf(CLI::App& app) {
    auto args = std::make_shared<ImportHfArgs>();
    CLI::App* cmd = app.add_subcommand("import-hf", "Convert a Hugging Face config.json to a Strata model JSON");
    cmd->add_option("config", args->config, "Hugging Face config.json")->required();
    cmd->add_option("-o,--output", args->output, "output model JSON (default '-': stdout)");
    cmd->add_option("--name", args->name, "model name (default: from _name_or_path or the file name)");
    add_int_option(cmd, "--seq-len", args->seq_len, 1, sim::kMaxSeqLen,
                   "training sequence length (default: max_position_embeddings, at most 8192)");
    cmd->add_flag("--sliding-window-as-full", args->windows_as_full,
                  "cost the sliding-window layers as full attention (an overestimate) instead of importing the window "
                  "(model.sliding_window)");
    cmd->callback([args] { run_import_hf(*args); });
}

}  // namespace

STRATA_COMMAND(40, register_import_hf);

}  // namespace strata::cli
