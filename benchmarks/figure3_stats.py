"""Figure 3's welfare statistics that seed000_paired.csv does not hold: in how many episodes PERL's
mean social welfare (mean over groups of social_welfare_<g>) is above RL's, the paired t-test of
the per-seed means over all episodes, and the applications per episode at the end.

    python benchmarks/figure3_stats.py outputs/studies/figure3
"""
import sys, pandas as pd
from pathlib import Path
from scipy import stats
root = Path(sys.argv[1])
rows = []
for d in sorted((root / 'runs').iterdir()):
    if not (d / 'summary.json').exists(): continue
    ep = pd.read_parquet(d / 'episodes.parquet')
    sw = ep[[c for c in ep.columns if c.startswith('social_welfare_')]].mean(axis=1)
    agent, rep = d.name.split('-')[0], int(d.name.rsplit('cr', 1)[1])
    rows.append(pd.DataFrame({'agent': agent, 'rep': rep, 'episode': ep['episode'] + 1, 'sw': sw.values,
                              'gap': ep['wealth_gap'].values, 'apps': (ep['applications_M'] + ep['applications_F']).values}))
df = pd.concat(rows)
piv = df.pivot_table(index=['rep', 'episode'], columns='agent', values='sw')
m = piv.groupby('episode').mean()
print('PERL mean welfare above RL in', int((m.perl > m.rl).sum()), 'of', len(m), 'episodes')
per_seed = piv.groupby('rep').mean()
d = per_seed.perl - per_seed.rl
t = stats.ttest_1samp(d, 0)
print('per-seed mean over episodes PERL-RL %+.5f sd %.5f p=%.3f %d/%d' % (d.mean(), d.std(ddof=1), t.pvalue, (d > 0).sum(), len(d)))
apps = df[df.episode > 990].groupby('agent').apps.mean()
print('applications per episode, episodes 991-1000:', apps.round(1).to_dict())
