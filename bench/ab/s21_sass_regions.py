"""Session 21: Nsight Compute's source page (ncu -i REP --page source --csv --print-source sass)
summed between landmarks (barriers, wgmma issues and waits, EXIT): each region's share of the warp
stall samples, its top three stall reasons and its most executed opcodes.
  python3 bench/ab/s21_sass_regions.py s512c_sass.csv"""
import csv,sys,re
rows=list(csv.reader(open(sys.argv[1])))
hdr=rows[1]; data=rows[2:]
si=hdr.index("Warp Stall Sampling (All Samples)"); ex=hdr.index("Instructions Executed")
sc=[(h,i) for i,h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
tot=sum(int(r[si]) for r in data)
land=re.compile(r"BAR\.SYNC|BAR\.ARV|HGMMA|DEPBAR|LDGDEPBAR|EXIT|SYNCS|WARPSYNC|BRA")
acc=0; accst={}; start=0; cnt={}
def flush(k,label):
    global acc,accst,start,cnt
    if acc*100/tot>=0.8:
        st=sorted(((v,h) for h,v in accst.items()),reverse=True)[:3]
        ops=sorted(cnt.items(), key=lambda x:-x[1])[:4]
        print(f"{start:5d}-{k:5d} {acc*100/tot:5.1f}%  {label[:50]:50s} {[(h,round(v*100/tot,1)) for v,h in st]} {ops}")
    acc=0; accst={}; start=k+1; cnt={}
for k,r in enumerate(data):
    s=int(r[si]); acc+=s
    for h,i in sc:
        if r[i] not in ('','0'): accst[h[6:]]=accst.get(h[6:],0)+int(r[i])
    op=r[1].strip().split()
    if op:
        o=op[1] if op[0].startswith('@') else op[0]
        o=o.split('.')[0]; cnt[o]=cnt.get(o,0)+int(r[ex]) if r[ex].isdigit() else 0
    src=r[1].strip()
    if re.search(r"BAR\.SYNC|HGMMA|DEPBAR|EXIT", src) and not "HGMMA" in src or ("HGMMA" in src and "!UPT" in src):
        flush(k,src)
flush(len(data),"end")
