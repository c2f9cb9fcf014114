/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* MESSAGE_ID= fields of the journal entries an operator searches for; each has an entry in
 * catalog/scopebox.catalog (journalctl -x shows it; tests/units/test_catalog.py keeps the two in
 * step). */
#pragma once

#define SCOPEBOX_MESSAGE_SESSION_CREATED  "MESSAGE_ID=48a0c20e448946bbb0629358dd054d97"
#define SCOPEBOX_MESSAGE_SESSION_RELEASED "MESSAGE_ID=0efd83ba8af04a0ab94f4e897ef3f3f1"
#define SCOPEBOX_MESSAGE_SESSION_REAPED   "MESSAGE_ID=b9071165e1a94ff1b9d9ef997eed7e13"
#define SCOPEBOX_MESSAGE_EXEC_KILLED      "MESSAGE_ID=1a2ef20abd694d139066a4a0dd399699"
#define SCOPEBOX_MESSAGE_LIMIT_REACHED    "MESSAGE_ID=bda64813a4cc465cbff01dac08bd448c"
#define SCOPEBOX_MESSAGE_ARCHIVE_FAILED   "MESSAGE_ID=ee1bb40261934c93a349feecf6762a1d"
#define SCOPEBOX_MESSAGE_ARCHIVE_ABANDONED "MESSAGE_ID=05c999b39333419c968f336205b9686f"
/* A create's damaged archive moved aside (quarantined) by the session manager. */
#define SCOPEBOX_MESSAGE_RESTORE_QUARANTINED "MESSAGE_ID=7eff1d84f21248a4a544ec9f9ee0838c"
#define SCOPEBOX_MESSAGE_RESTORE_FAILED   "MESSAGE_ID=389fb25b834c49f497535290730bf6f0"
#define SCOPEBOX_MESSAGE_RUNNER_LOST      "MESSAGE_ID=6107581e773348c193ce60e09933eff0"
#define SCOPEBOX_MESSAGE_DRAIN_CHANGED    "MESSAGE_ID=18594e21a0a34882916fbe6bcc8afdf1"
