#ifndef WARREN_SPAWN_H
#define WARREN_SPAWN_H

/* Handles "TAG spawn KEY=VALUE..." (fields f[0..n-1]): replies "TAG ok PID" or "TAG err ERRNO MSG". */
void spawn_sandbox(const char *tag, char **f, int n);

#endif
