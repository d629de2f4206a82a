#ifndef GV_VERSION_H
#define GV_VERSION_H
#define GV_VERSION "0.1.0"
#endif
