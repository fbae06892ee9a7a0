/* The same scenario as tests/it/scope.rs under the system loader (the oracle): two
   libraries dlopened RTLD_GLOBAL, then a plugin that binds to their dependencies.
   Usage: scope_oracle libscope_root.so libscope_root2.so libscope_plugin.so */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    for (int i = 1; i <= 2; i++)
        if (!dlopen(argv[i], RTLD_NOW | RTLD_GLOBAL)) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    void *p = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL);
    if (!p) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    int (*f)(void) = (int (*)(void))dlsym(p, "plugin_main");
    int (*pick)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "pick");
    printf("plugin_main=%d pick=%d\n", f(), pick());
    return 0;
}
