// A C++ host built against include/elf_loader.h: loads the cxx_runtime fixture twice
// through the C ABI and catches exceptions that cross between the host and
// custom-loaded code in both directions (the unwinder finds the custom copies' frames
// through their registered .eh_frame and the host's through dl_iterate_phdr). Then
// std::call_once, thread_local objects and std::threads in both copies, a destructor
// still pending in the main thread when the namespaces are deleted (run at exit), and
// exit. Usage: cxx_host /path/libcxx_runtime.so
#include "elf_loader.h"
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace fixture {
// The same class as the fixture's: exception matching compares type names.
struct Error : std::runtime_error {
    int code;
    Error(const std::string &what, int c) : std::runtime_error(what), code(c) {}
};
}  // namespace fixture

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

struct Copy {
    elf_loader_namespace *ns = nullptr;
    elf_loader_library *lib = nullptr;
    template <class F> F fn(const char *name) {
        void *a = elf_loader_library_sym(lib, name);
        if (!a) { fprintf(stderr, "missing %s: %s\n", name, elf_loader_last_error()); exit(1); }
        return reinterpret_cast<F>(a);
    }
};

static int host_callback(int v) {
    if (v > 100) throw std::invalid_argument("host says no to " + std::to_string(v));
    return v * 2;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s libcxx_runtime.so\n", argv[0]); return 2; }
    Copy copies[2];
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "cxx-host-%d", i);
        copies[i].ns = elf_loader_namespace_new(name);
        if (elf_loader_namespace_load(copies[i].ns, argv[1], &copies[i].lib) != ELF_LOADER_OK) {
            fprintf(stderr, "load: %s\n", elf_loader_last_error());
            return 1;
        }
        copies[i].fn<void (*)(int)>("set_copy_id")(i + 1);
    }
    for (int i = 0; i < 2; i++) {
        Copy &c = copies[i];
        // Custom-loaded code throws; the host catches, by the fixture's own class.
        auto throw_error = c.fn<int (*)(int)>("throw_error");
        try {
            throw_error(40 + i);
            CHECK(false, "no exception");
        } catch (const fixture::Error &e) {
            CHECK(e.code == 40 + i, "code %d", e.code);
            CHECK(std::string(e.what()) == "fixture error " + std::to_string(40 + i), "what %s", e.what());
        }
        try {
            throw_error(7);
        } catch (const std::runtime_error &e) {
            CHECK(std::string(e.what()) == "fixture error 7", "caught as its base class: %s", e.what());
        }
        // The host throws through a custom-loaded frame and catches its own exception.
        auto call_through = c.fn<int (*)(int (*)(int), int)>("call_through");
        CHECK(call_through(host_callback, 5) == 11, "callback result");
        try {
            call_through(host_callback, 500);
            CHECK(false, "no exception");
        } catch (const std::invalid_argument &e) {
            CHECK(std::string(e.what()) == "host says no to 500", "what %s", e.what());
        }
        // An exception carried between threads inside the copy.
        char buf[64] = {0};
        CHECK(c.fn<int (*)(char *, int)>("future_exception")(buf, sizeof buf) == 18, "future");
        CHECK(strcmp(buf, "from a std::thread") == 0, "future message %s", buf);
        // std::call_once and thread_local objects, per copy.
        CHECK(c.fn<int (*)()>("run_once")() == 1, "once");
        CHECK(c.fn<int (*)(int)>("run_threads")(3) == 3 * ((i + 1) * 1000 + 2), "threads");
        CHECK(c.fn<int (*)()>("constructed")() == 3 && c.fn<int (*)()>("destructed")() == 3,
              "thread_local objects of the copy's threads constructed and destroyed");
    }
    // Host threads use both copies' thread_local objects at once.
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; t++)
        ts.emplace_back([&copies, t] {
            Copy &c = copies[t % 2];
            auto bump = c.fn<int (*)()>("bump");
            bump();
            CHECK(bump() == (t % 2 + 1) * 1000 + 2, "host thread's object");
        });
    for (auto &t : ts) t.join();
    for (int i = 0; i < 2; i++)
        CHECK(copies[i].fn<int (*)()>("destructed")() == 5, "host threads' objects destroyed");
    // The main thread's own object stays pending past the namespaces' deletion: they
    // stay loaded until exit runs the destructor.
    CHECK(copies[0].fn<int (*)()>("bump")() == 1001, "main thread's object");
    for (int i = 0; i < 2; i++) {
        CHECK(elf_loader_library_delete(copies[i].lib) == ELF_LOADER_OK, "delete library");
        CHECK(elf_loader_namespace_delete(copies[i].ns) == ELF_LOADER_OK, "delete namespace");
    }
    if (failures) {
        printf("%d checks failed\n", failures);
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}
