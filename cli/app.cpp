// The `strata` command line: the registry the cmd_*.cpp files fill, the application built from it,
// and the run that maps errors to exit codes: 0 ok, 1 internal/environment failure, 2 bad input
// (the message names the file, the field and the rule), 130 interrupted (Ctrl-C). Never writes a
// partial file. main.cpp only calls run(); the tests build the same application (build_app).
#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <iostream>
#include <vector>

#include "cli.hpp"
#include "strata/common/error.hpp"
#include "strata/common/text.hpp"

namespace strata::cli {

namespace {
std::vector<std::pair<int, Registrar>>& registry() {
    static std::vector<std::pair<int, Registrar>> r;
    return r;
}
}  // namespace

bool register_command(int order, Registrar r) {
    registry().emplace_back(order, std::move(r));
    return true;
}

// CLI11 answers `strata nosuch` with "A subcommand is required": the word was taken for an
// argument. Walk the command words first: a word where a command must come that names none is an
// unknown command, with a suggestion and the list.
bool unknown_command(const CLI::App& app, int argc, const char* const* argv, std::string& message) {
    const CLI::App* level = &app;
    std::string where = "strata";
    for (int i = 1; i < argc; ++i) {
        const std::string word = argv[i];
        if (word.empty() || word[0] == '-') return false;  // options: CLI11's business
        std::vector<std::string> names;
        for (const CLI::App* sub : level->get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
        if (names.empty()) return false;
        const CLI::App* next = nullptr;
        for (const CLI::App* sub : level->get_subcommands([](const CLI::App*) { return true; }))
            if (sub->check_name(word)) next = sub;
        if (!next) {
            if (level->get_require_subcommand_min() == 0) return false;
            std::string list;
            for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
            const std::string dym = strata::did_you_mean(word, names);
            message = "\"" + word + "\" is not a command of " + where + (dym.empty() ? "" : " (did you mean \"" + dym + "\"?)") +
                      "; commands: " + list + " (`" + where + " --help` says what each does)";
            return true;
        }
        level = next;
        where += " " + next->get_name();
    }
    if (level->get_require_subcommand_min() == 0) return false;
    std::string list;
    for (const CLI::App* sub : level->get_subcommands([](const CLI::App*) { return true; })) list += (list.empty() ? "" : ", ") + sub->get_name();
    message = where + " needs a command: " + list + " (`" + where + " --help` says what each does)";
    return true;
}

void build_app(CLI::App& app) {
    app.set_version_flag("--version", std::string("strata ") + STRATA_VERSION);
    app.require_subcommand(1);
    // Every error line starts the same way, CLI11's parse errors included.
    app.failure_message([](const CLI::App*, const CLI::Error& e) {
        return std::string("error: ") + e.what() + " (`strata COMMAND --help` lists the options and their ranges)\n";
    });
    auto& reg = registry();
    std::stable_sort(reg.begin(), reg.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [order, fn] : reg) fn(app);
    // CLI::Range lets NaN through (every comparison with it is false), and a real option rarely
    // means infinity: every real-valued option of every command refuses both.
    const CLI::Validator finite(
        [](std::string& text) -> std::string {
            double x = 0;
            if (CLI::detail::lexical_cast(text, x) && !std::isfinite(x)) return "Value " + text + " is not a finite number";
            return "";
        },
        "", "finite");
    std::function<void(CLI::App*)> harden = [&](CLI::App* a) {
        for (CLI::Option* o : a->get_options())
            if (o->get_type_name().rfind("FLOAT", 0) == 0) o->check(finite);
        for (CLI::App* sub : a->get_subcommands([](CLI::App*) { return true; })) harden(sub);
    };
    harden(&app);
}

int run(int argc, char** argv) {
    CLI::App app{"Strata: simulate and plan large-model training before paying for it"};
    build_app(app);
    std::string unknown;
    if (unknown_command(app, argc, argv, unknown)) {
        std::cerr << "error: " << unknown << "\n";
        return 2;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        app.exit(e);
        return 2;
    } catch (const InputError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    } catch (const Interrupted& e) {
        std::cerr << "interrupted: " << e.what() << "\n";
        return 130;
    } catch (const RuntimeError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "internal error: " << e.what() << "\n";
        return 1;
    }
    return 0;
}

}  // namespace strata::cli
