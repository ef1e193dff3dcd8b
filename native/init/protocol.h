/* The warren-init protocol's frame kinds (docs/init-protocol.md). Generated from
 * packages/edge/src/init/protocol.ts by scripts/gen-init-protocol.mjs: do not edit by hand. */
#ifndef WARREN_INIT_PROTOCOL_H
#define WARREN_INIT_PROTOCOL_H

#define PROTO_VERSION "2"
#define MAX_FRAME 16777217u

/* Requests: the first frame on a connection. */
#define REQ_HELLO                'H'
#define REQ_EXEC                 'E'
#define REQ_SIGNAL_COMMAND       'K'
#define REQ_NEW_SESSION          'N'
#define REQ_SESSION_RUN          'Q'
#define REQ_END_SESSION          'D'
#define REQ_READ                 'R'
#define REQ_WRITE                'W'
#define REQ_STAT                 'S'
#define REQ_LIST                 'L'
#define REQ_REMOVE               'X'
#define REQ_MKDIR                'M'
#define REQ_MOVE                 'V'
#define REQ_ATTRS                'A'
#define REQ_SETUP                'C'
#define REQ_REUSE                'Y'
#define REQ_FN                   'F'

/* Frames the edge sends after its request. */
#define CLIENT_DATA              'i'
#define CLIENT_EOF               'j'
#define CLIENT_SIGNAL            'k'
#define CLIENT_RESIZE            'w'

/* Frames the init sends. */
#define REPLY_STARTED            's'
#define REPLY_STDOUT             'o'
#define REPLY_STDERR             'r'
#define REPLY_DONE               'x'
#define REPLY_FAILED             'f'
#define REPLY_HELLO              'k'
#define REPLY_SESSION            'n'
#define REPLY_ENTRY              'e'
#define REPLY_READY              'y'

#endif
