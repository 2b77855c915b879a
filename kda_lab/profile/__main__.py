from kda_lab.profile.command import main

raise SystemExit(main())
