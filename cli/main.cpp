// strata: the command-line face of the library. Exit codes: 0 ok, 1 internal/environment failure,
// 2 bad input (the message names the file, the field and the rule). Never writes a partial file.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <vector>

#include "cli.hpp"
#include "strata/common/error.hpp"

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

}  // namespace strata::cli

int main(int argc, char** argv) {
    CLI::App app{"Strata: simulate and plan large-model training before paying for it"};
    app.set_version_flag("--version", std::string("strata ") + STRATA_VERSION);
    app.require_subcommand(1);
    auto& reg = strata::cli::registry();
    std::stable_sort(reg.begin(), reg.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [order, fn] : reg) fn(app);
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
    } catch (const strata::InputError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    } catch (const strata::RuntimeError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "internal error: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
